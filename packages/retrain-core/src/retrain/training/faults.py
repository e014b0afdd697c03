"""Fault injection for crash-safety tests: `RETRAIN_CRASH_AT=<point>@<step>` makes the
process SIGKILL itself when it reaches that point of that step (never set in normal runs).

Points: `after_step` (metrics row written, before any checkpoint), `after_checkpoint`
(checkpoint directory and trainer_state.json both written), `mid_checkpoint` (checkpoint
directory written, trainer_state.json not yet), `mid_metrics` (half of a metrics row on disk).
"""

from __future__ import annotations

import os
import signal

_ENV = "RETRAIN_CRASH_AT"


def _target() -> tuple[str, int] | None:
    raw = os.environ.get(_ENV, "")
    point, sep, step = raw.partition("@")
    if not sep or not step.lstrip("-").isdigit():
        return None
    return point, int(step)


def armed(point: str, step: int) -> bool:
    return _target() == (point, step)


def crash_if(point: str, step: int) -> None:
    if armed(point, step):
        os.kill(os.getpid(), signal.SIGKILL)
