"""ECHO's auxiliary supervised term in the local backend's update (spec algorithms.md §11).

The policy loss reads the tokens with a non-zero advantage; ECHO reads the environment's
tokens with a positive weight (`Datum.echo_weights`, already normalised by the trainer,
retrain.training.echo). Both come out of one backbone pass: the head runs on the union of the
two position sets, and the result is split back, so ECHO costs no second forward. ECHO's
logprobs are therefore at the training temperature, like the policy term's.
"""

from __future__ import annotations

import torch


def positions(action: torch.Tensor, echo: torch.Tensor | None) -> torch.Tensor:
    """The positions whose logprobs the update needs: the action tokens, plus ECHO's."""
    return action if echo is None else action | (echo > 0)


def split(logprobs: torch.Tensor, action: torch.Tensor, echo: torch.Tensor | None
          ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(the action tokens' logprobs, ECHO's term: sum of -log p * w) from the logprobs of
    `positions(action, echo)` in row-major order."""
    if echo is None:
        return logprobs, None
    selected = positions(action, echo)
    on_echo = (echo > 0)[selected]
    term = -(logprobs[on_echo] * echo[echo > 0].to(logprobs.dtype)).sum()
    return logprobs[action[selected]], term


def tokens(echo: torch.Tensor | None) -> int:
    return 0 if echo is None else int((echo > 0).sum())
