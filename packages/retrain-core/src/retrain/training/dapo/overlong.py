"""DAPO's two treatments of completions that run into `max_tokens` (arXiv 2503.14476, §3.4):
the soft overlong punishment, a penalty added to the reward of a completion that enters the
last `overlong_buffer` tokens before `max_tokens`, and the truncation mask, which leaves the
completions cut at `max_tokens` out of the policy loss.

With L a completion's sampled tokens (its EOS included), Lmax = `[training] max_tokens`,
Lbuf = `overlong_buffer` and f = `overlong_penalty_factor`:

    penalty(L) = 0                              L <= Lmax - Lbuf
               = f (Lmax - Lbuf - L) / Lbuf     Lmax - Lbuf < L <= Lmax   (-f at L = Lmax)

TRL's `trl.rewards.get_soft_overlong_punishment(Lmax, Lbuf)` (f = 1) and verl's DAPO reward
manager (`min(-(L - (Lmax - Lbuf)) / Lbuf * f, 0)`) compute the same. No completion is longer
than Lmax here (the engines stop there); one that were would get -f, as in TRL.

The penalty enters the rewards the advantages are computed from (`Group.shaped_rewards`), and
so the reward ties that decide which groups train; the logged `mean_reward` and correct rate
stay the task reward's, comparable with runs without shaping.

The mask follows TRL's `mask_truncated_completions`: a completion with finish_reason "length"
keeps its place in its group's advantages (its reward still counts) but its datum trains no
token (loss mask and advantages zero). It still counts as a completion of the update, so the
loss aggregations that divide by completions (`seq_mean_token_mean`, `constant`) divide by the
same number TRL's `grpo` and `dr_grpo` losses do; `token_mean` divides by the unmasked tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec
import numpy as np
from numpy.typing import ArrayLike

from retrain.advantages.ragged import Floats
from retrain.errors import UserError
from retrain.types import Datum

if TYPE_CHECKING:
    from retrain.config.schema import TrainConfig
    from retrain.rollout.group import Group


def overlong_penalty(lengths: ArrayLike, max_tokens: int, buffer: int, factor: float = 1.0) -> Floats:
    """The soft overlong punishment of each completion length (tokens); zeros when `buffer`
    is 0."""
    n = np.asarray(lengths, dtype=np.float64).reshape(-1)  # (completions,)
    if buffer <= 0:
        return np.zeros_like(n)
    return np.clip(factor * (max_tokens - buffer - n) / buffer, -factor, 0.0)


@dataclass(frozen=True)
class OverlongShaping:
    max_tokens: int
    buffer: int
    factor: float = 1.0

    @classmethod
    def of(cls, config: TrainConfig) -> OverlongShaping | None:
        t = config.training
        return cls(t.max_tokens, t.overlong_buffer, t.overlong_penalty_factor) if t.overlong_buffer > 0 else None

    def shape(self, groups: Sequence[Group]) -> list[Group]:
        """The groups with their penalties set. A multi-turn group is refused: `max_tokens`
        bounds each turn, not the episode whose tokens would be measured."""
        out = []
        for g in groups:
            if g.episodes is not None:
                raise UserError("[training] overlong_buffer: the overlong penalty of multi-turn episodes is not "
                                "built yet (max_tokens bounds each turn, not the episode)",
                                hint="overlong_buffer = 0 with a multi-turn environment")
            lengths = [len(c.token_ids) for c in g.completions]
            out.append(dataclasses.replace(g, penalties=overlong_penalty(lengths, self.max_tokens, self.buffer,
                                                                          self.factor)))
        return out


def shaping_metrics(groups: Sequence[Group]) -> dict[str, float]:
    """`overlong/penalty_mean` (over every completion of the step) and
    `overlong/penalized_share` (completions with a penalty); {} when nothing was shaped."""
    shaped = [g.penalties for g in groups if g.penalties is not None]
    if not shaped:
        return {}
    p = np.concatenate(shaped)  # (completions,)
    return {"overlong/penalty_mean": float(p.mean()) if p.size else 0.0,
            "overlong/penalized_share": float((p < 0).mean()) if p.size else 0.0}


def masked(datum: Datum) -> Datum:
    """`datum` with no token in the policy loss: loss mask and advantages zero (its tokens,
    logprobs and ECHO weights unchanged)."""
    n = len(datum.tokens)
    return msgspec.structs.replace(datum, mask=[0] * n, advantages=[0.0] * n)
