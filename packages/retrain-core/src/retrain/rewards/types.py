"""What a reward is (score one response against its reference) and what a batch returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from retrain.advantages.ragged import Floats
from retrain.errors import UserError


@runtime_checkable
class Reward(Protocol):
    """`score(response, reference) -> float`; may also be `async def score`."""

    def score(self, response: str, reference: str) -> Any: ...


class RewardUnavailable(UserError, RuntimeError):
    """A reward that cannot be built here (a missing optional package); the message says
    which package and how to install it."""


@dataclass(frozen=True)
class RewardFault:
    """One kind of reward failure: `kind` names the exception and where it was raised
    ("ZeroDivisionError at plugins/graded.py:3 in digit_share"), `message` its text, and
    `traceback` the full one (empty for a timeout or a non-numeric result)."""

    kind: str
    message: str
    traceback: str = ""

    def line(self) -> str:
        return f"{self.kind}: {self.message}" if self.message else self.kind


@dataclass(frozen=True)
class RewardBatch:
    """Scores of a batch; a failed or timed-out item scores 0.0 and is counted. `faults` holds
    the first failure of each kind in the batch."""

    scores: Floats
    errors: int = 0
    timeouts: int = 0
    failures: list[str] = field(default_factory=list)  # the first few messages, for the log
    faults: list[RewardFault] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)  # the reward's own counters (judge/...)

    def metrics(self) -> dict[str, float]:
        return {"reward_errors": float(self.errors), "reward_timeouts": float(self.timeouts), **self.extra}

    def to_dict(self) -> dict[str, Any]:
        return {"scores": self.scores.tolist(), "errors": self.errors, "timeouts": self.timeouts,
                "failures": list(self.failures)}

    @property
    def mean(self) -> float:
        return float(np.mean(self.scores)) if self.scores.size else 0.0
