"""Fault injection for crash-safety tests: `RETRAIN_CRASH_AT=<point>@<step>` makes the
process SIGKILL itself when it reaches that point of that step (never set in normal runs).

Points: `after_step` (metrics row written, before any checkpoint), `after_checkpoint`
(checkpoint directory and trainer_state.json both written), `mid_checkpoint` (checkpoint
directory written, trainer_state.json not yet), `mid_metrics` (half of a metrics row on disk);
warmup steps use `warmup_after_step`, `warmup_mid_checkpoint` and `warmup_after_checkpoint`.

In a campaign, `RETRAIN_CRASH_RUN=<run name>` confines the crash to that run (the campaign
drops RETRAIN_CRASH_AT from every other run's environment), and `RETRAIN_CRASH_GROUP=1`
kills the whole process group instead of the one process: the campaign driver and all its
workers, as a machine that goes down would.

In a multi-process run (torchrun), `RETRAIN_CRASH_RANK=<rank>` confines the crash to that
rank: the others are left to the launcher, as when one GPU's process dies.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping

_ENV = "RETRAIN_CRASH_AT"
_RUN = "RETRAIN_CRASH_RUN"
_GROUP = "RETRAIN_CRASH_GROUP"
_RANK = "RETRAIN_CRASH_RANK"


def _target() -> tuple[str, int] | None:
    raw = os.environ.get(_ENV, "")
    point, sep, step = raw.partition("@")
    if not sep or not step.lstrip("-").isdigit():
        return None
    return point, int(step)


def armed(point: str, step: int) -> bool:
    rank = os.environ.get(_RANK)
    if rank is not None and rank != os.environ.get("RANK", "0"):
        return False
    return _target() == (point, step)


def crash_if(point: str, step: int) -> None:
    if armed(point, step):
        if os.environ.get(_GROUP):
            os.killpg(os.getpgid(0), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def point(phase: str, name: str) -> str:
    """The fault point `name` of a phase: warmup and SFT steps prefix theirs (`warmup_mid_checkpoint`,
    `sft_after_checkpoint`); RL steps ("" phase) use the bare name."""
    return f"{phase}_{name}" if phase else name


def run_environ(run_name: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of one campaign run: the crash point only for the targeted run."""
    env = dict(environ)
    target = env.get(_RUN)
    if target is not None and target != run_name:
        env.pop(_ENV, None)
    return env
