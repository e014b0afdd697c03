"""Segments from turns that each report their whole prompt: ECHO's compatibility path (spec
algorithms.md §11), for environments that render every prompt afresh instead of extending the
token stream (retrain.rollout.episode: token-in/token-out, what retrain's own environments do).

Turn by turn, the stream so far (the segment's prompt, then each turn's observation and
sampled tokens) is compared with the next turn's prompt:

- the prompt extends the stream exactly: the turn joins the segment, and the prompt's new
  tokens are its observation (none when the prompt adds nothing). An `observation_mask` over
  the prompt, when it has the prompt's length, marks which of them the environment wrote (the
  rest are the chat template's and get no ECHO weight); with any other length it is ignored,
  the observation gets no ECHO weight, and the turn is counted (`Stitched.bad_masks`);
- it does not: the segment ends, and a new one starts from that prompt, with its
  `prefix_overlap` with the stream it left recorded as `Segment.overlap`. ECHO counts the
  splits whose overlap is under `[echo] min_prompt_overlap` (retrain.training.echo).

Worked example: prompts and samples [1 2 3] -> [4 5]; [1 2 3 4 5 6 7] -> [8];
[1 2 9 9 9] -> [10]; [1 2 9 9 9 10 11] -> [12] stitch into two segments: [1 2 3] with turns
([] / [4 5]) and ([6 7] / [8]); then [1 2 9 9 9], overlap 2 / min(8, 5) = 0.4, with turns
([] / [10]) and ([11] / [12]).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from retrain.rollout.episode import Segment, Turn


class PromptedTurn(msgspec.Struct, kw_only=True):
    """One turn as such an environment reports it: the whole prompt the policy answered, what it
    sampled, and optionally which prompt tokens the environment wrote (1) or not (0)."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    observation_mask: list[int] | None = None
    entropies: list[float] | None = None
    finish_reason: str = "stop"


@dataclass
class Stitched:
    segments: list[Segment] = field(default_factory=list)
    bad_masks: int = 0  # turns whose observation_mask did not have their prompt's length


def prefix_overlap(row: Sequence[int], prompt: Sequence[int]) -> float:
    """The common prefix of `row` and `prompt` as a share of the shorter one (0.0 when either is empty)."""
    n = 0
    for a, b in zip(row, prompt, strict=False):
        if a != b:
            break
        n += 1
    return n / max(min(len(row), len(prompt)), 1)


def stitch(turns: Sequence[PromptedTurn]) -> Stitched:
    out = Stitched()
    row: list[int] = []
    for turn in turns:
        prompt = list(turn.prompt_ids)
        extends = bool(out.segments) and prompt[:len(row)] == row
        if not extends:
            overlap = prefix_overlap(row, prompt) if out.segments else 1.0
            out.segments.append(Segment(prompt_ids=prompt, overlap=overlap))
            row = list(prompt)
        observation = prompt[len(row):]
        mask = _mask(turn.observation_mask, len(prompt), len(row), out)
        out.segments[-1].turns.append(Turn(token_ids=list(turn.token_ids), logprobs=list(turn.logprobs),
                                           observation=observation, observation_mask=mask,
                                           entropies=turn.entropies, finish_reason=turn.finish_reason))
        row += observation + list(turn.token_ids)
    return out


def _mask(given: list[int] | None, prompt_len: int, start: int, out: Stitched) -> list[bool] | None:
    """The observation's share of a prompt-long mask; all False (and counted) for a mask of any other length."""
    if given is None:
        return None
    if len(given) != prompt_len:
        out.bad_masks += 1
        return [False] * (prompt_len - start)
    return [bool(m) for m in given[start:]]
