"""ECHO: an auxiliary supervised loss on the environment's tokens of multi-turn episodes
(spec algorithms.md §11), trained in the same forward/backward pass as the policy loss.

The trainer gives every retained observation token of an episode the weight
`weight / (D * max(n_obs, 1e-3))`, where n_obs is the episode's observation-token count
before the caps and D the number of episodes with observation tokens, and hands them to the
backend on `Datum.echo_weights`; the backend adds sum(-log p * w). The auxiliary loss is
then the mean over episodes of weight x (the summed observation NLL / that episode's
pre-cap observation count), exactly the reference's; tokens dropped by a cap are not
renormalised.

Retention per step: `all` keeps every observation token; `bounded` keeps the first
min(max_tokens_per_step, floor(sampled tokens x max_token_ratio)) in datum order, and none
when the mean surprisal of the step's sampled tokens is below `entropy_floor` (a
collapsed policy would learn only to copy its environment).

Where a prompt did not extend its episode's token stream, a new segment began
(retrain.rollout.stitch): the step row counts those splits (`echo/split_segments`) and the ones
whose prompt kept less than `min_prompt_overlap` of the stream (`echo/low_overlap_segments`:
the environment rewrote most of the conversation, so the observation tokens ECHO sees there are
few, or none).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from retrain.rollout.episode import Episode, echo_layout


@dataclass(frozen=True)
class EchoSettings:
    weight: float
    retention: str  # "bounded" | "all"
    max_tokens_per_step: int
    max_token_ratio: float
    entropy_floor: float
    min_prompt_overlap: float = 0.5

    @classmethod
    def of(cls, config: object) -> EchoSettings | None:
        e = config.echo  # type: ignore[attr-defined]
        if not e.enabled:
            return None
        if e.loss_fn != "cross_entropy":  # the schema admits no other value today
            raise ValueError(f"[echo] loss_fn {e.loss_fn!r} is not a loss retrain has")
        return cls(e.weight, e.target_retention, e.max_tokens_per_step, e.max_token_ratio, e.entropy_floor,
                   e.min_prompt_overlap)


def echo_weights(settings: EchoSettings, episodes: Sequence[Episode], sampled_logprobs: Sequence[float],
                 ) -> tuple[list[list[list[float]]], dict[str, float]]:
    """Per episode, per segment, the ECHO weight of each non-prompt position (in the order of
    `echo_layout`), and the step's ECHO metrics. `sampled_logprobs` are every sampled token's
    logprob of the step (the surprisal the entropy floor reads)."""
    layouts = [[echo_layout(s) for s in e.segments] for e in episodes]
    counts = [sum(sum(lay) for lay in segs) for segs in layouts]
    total = sum(counts)
    eligible = sum(1 for n in counts if n > 0)
    sampled = len(sampled_logprobs)
    surprisal = float(-np.mean(sampled_logprobs)) if sampled else 0.0
    if settings.retention == "all":
        allowed = total
        collapsed = False
    else:
        allowed = max(0, min(settings.max_tokens_per_step, math.floor(sampled * settings.max_token_ratio)))
        collapsed = surprisal < settings.entropy_floor
        if collapsed:
            allowed = 0
    left = allowed
    out: list[list[list[float]]] = []
    for segs, n in zip(layouts, counts, strict=True):
        w = settings.weight / (max(eligible, 1) * max(n, 1e-3))
        rows = []
        for lay in segs:
            row = []
            for is_obs in lay:
                if is_obs and left > 0:
                    row.append(w)
                    left -= 1
                else:
                    row.append(0.0)
            rows.append(row)
        out.append(rows)
    kept = allowed - left
    splits = [s.overlap for e in episodes for s in e.segments[1:]]
    metrics = {"echo/observation_tokens": float(total), "echo/kept_tokens": float(kept),
               "echo/kept_fraction": kept / total if total else 0.0, "echo/episodes": float(eligible),
               "echo/entropy_floor_hit": float(collapsed), "echo/sampled_surprisal_mean": surprisal,
               "echo/split_segments": float(len(splits)),
               "echo/low_overlap_segments": float(sum(o < settings.min_prompt_overlap for o in splits))}
    return out, metrics
