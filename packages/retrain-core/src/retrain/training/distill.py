"""On-policy distillation's stage of the producer: the teacher scores every sampled token of a
batch, after its rewards, in the thread that produced it (so with `max_async_level` > 0 the
teacher works while the trainer trains), and each group carries the teacher's logprobs to the
advantages (retrain.advantages.teacher).

What the teacher reads is exactly what the policy conditioned on: the prompt's ids and the
sampled ids of a completion; for a multi-turn episode, each segment's token stream (prompt,
observations, turns), of which the sampled positions are kept, in turn order, aligned with
`Episode.completion()`. A group dynamic sampling left out (`Group.dropped`) is not scored: it
trains nothing.

The step's row gets `teacher/kl` (the mean over the scored tokens of logp_student -
logp_teacher: the sampled reverse KL per token), `teacher/tokens`, `teacher/time_s` and the
teacher's own counters (a server's `teacher/requests`, `teacher/retries`, `teacher/latency_s`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from retrain.rollout.episode import Episode
from retrain.rollout.group import Group, StepRollouts
from retrain.teacher.protocol import ScoreRow, Teacher

#: (row index into the request, positions of the row's scores that are sampled tokens)
Pick = tuple[int, list[int]]


def score_groups(teacher: Teacher, rollouts: StepRollouts) -> None:
    """Fill `teacher_logprobs` of every group that may train, and the rollouts' teacher time
    and metrics."""
    t0 = time.perf_counter()
    rows: list[ScoreRow] = []
    plan: list[tuple[Group, list[list[Pick]]]] = []  # per group, per completion: its rows' picks
    for g in rollouts.groups:
        if g.dropped:
            continue
        per_completion = []
        for i, c in enumerate(g.completions):
            made = _episode_rows(g.episodes[i]) if g.episodes is not None else \
                [(ScoreRow(g.prompt_ids + c.token_ids, len(g.prompt_ids)), list(range(len(c.token_ids))))]
            picks = []
            for row, where in made:
                if where:
                    picks.append((len(rows), where))
                    rows.append(row)
            per_completion.append(picks)
        plan.append((g, per_completion))
    scored = teacher.score(rows) if rows else []
    if len(scored) != len(rows):
        raise RuntimeError(f"the teacher scored {len(scored)} rows of {len(rows)}")
    gaps: list[np.ndarray] = []
    for g, per_completion in plan:
        teacher_C: list[np.ndarray] = []
        for c, picks in zip(g.completions, per_completion, strict=True):
            lps = [scored[k][j] for k, where in picks for j in where]
            if len(lps) != len(c.token_ids):
                raise RuntimeError(f"the teacher gave {len(lps)} logprobs for a completion of {len(c.token_ids)} "
                                   "sampled tokens")
            t = np.asarray(lps, dtype=np.float64)
            teacher_C.append(t)
            gaps.append(np.asarray(c.logprobs, dtype=np.float64) - t)
        g.teacher_logprobs = teacher_C
    gap = np.concatenate(gaps) if gaps else np.zeros(0)
    rollouts.teacher_time_s = time.perf_counter() - t0
    rollouts.teacher_metrics = {"teacher/kl": float(gap.mean()) if gap.size else 0.0,
                                "teacher/tokens": float(gap.size),
                                "teacher/time_s": round(rollouts.teacher_time_s, 6), **teacher.metrics()}


def _episode_rows(episode: Episode) -> list[tuple[ScoreRow, list[int]]]:
    """One row per segment: its token stream from the prompt on, and which of the scored
    positions (from the first after the prompt) hold sampled tokens."""
    out = []
    for seg in episode.segments:
        tokens = list(seg.prompt_ids)
        sampled: list[int] = []
        for turn in seg.turns:
            tokens += turn.observation
            sampled += range(len(tokens) - len(seg.prompt_ids), len(tokens) - len(seg.prompt_ids) + len(turn.token_ids))
            tokens += turn.token_ids
        out.append((ScoreRow(tokens, len(seg.prompt_ids)), sampled))
    return out


def teacher_rows_of(g: Group, members: Sequence[int]) -> list[np.ndarray]:
    """The teacher's logprobs of the group's `members`, in order; the group must have been scored."""
    if g.teacher_logprobs is None:
        raise RuntimeError("a group trains with [teacher] on but the teacher never scored it")
    return [g.teacher_logprobs[i] for i in members]
