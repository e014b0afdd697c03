"""What a distillation teacher is to the RL loop: something that scores given tokens.

`Teacher.score(rows)` returns, for each `ScoreRow`, log p_teacher(tokens[j] | tokens[:j]) for
every position j from `start` to the row's end, at temperature 1 (the teacher's own
distribution: no sampler truncation). A teacher is frozen: the same rows always score the
same, which is what keeps a resumed run's advantages equal to an uninterrupted run's.

Built-in teachers: a checkpoint loaded beside the student by its backend (the local backend's
`retrain.backends.local.teacher`, offered through `BackendDefinition.teacher`), and an
OpenAI-compatible server (`retrain.teacher.server`), either made by `retrain.teacher.create`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import msgspec


class ScoreRow(msgspec.Struct, frozen=True):
    """One token row to score from position `start` (>= 1: the first token has no context)."""

    tokens: list[int]
    start: int


@runtime_checkable
class Teacher(Protocol):
    #: what the run's messages call it (the checkpoint, or the served model and its server)
    name: str

    def score(self, rows: Sequence[ScoreRow]) -> list[list[float]]:
        """Per row, len(tokens) - start logprobs; raises on a failure it cannot recover from."""
        ...

    def metrics(self) -> dict[str, float]:
        """Counters since the previous call (`teacher/...`: requests, retries), for the step's row."""
        ...

    def close(self) -> None: ...
