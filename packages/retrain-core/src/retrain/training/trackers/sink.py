"""The contract of an experiment tracker (a sink), what it receives, and the sink that drops it.

A tracker is built by a factory `factory(config: TrainConfig) -> Sink` (a built-in of the
registry's `tracker` kind, an entry point of group `retrain.trackers`, or a dotted path named
in `[logging] trackers`); building one imports nothing heavy, `start` does. Per run the
trainer calls, in order: `start` once, `log_row` per row and `log_artifact` per saved
checkpoint, then `finish` once with the run's exit code (0 success, 1 failure, 130 an
interrupt), also when the run fails. Only rank 0 of a multi-process run calls them.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from retrain.errors import UserError
from retrain.registry.health import COMPONENTS

#: The prefix of a metrics row's keys in every tracker (W&B's `train/loss`); evaluation rows
#: keep their own `eval/...` keys.
TRAIN_PREFIX = "train/"


@dataclass(frozen=True)
class RunInfo:
    """What a tracker names and describes a run with."""

    name: str  # basename of the log directory, else the condition label
    log_dir: Path
    trainer: str
    condition: str
    config: Mapping[str, Any]  # the resolved config by section, secrets redacted (config.snapshot)


@dataclass(frozen=True)
class ArtifactFolder:
    """A saved checkpoint offered to the trackers: a folder with its trainer_state.json."""

    path: Path
    name: str  # checkpoint_step_N, warmup_step_N, sft_step_N or final
    steps: int  # the phase's steps the checkpoint covers, as its name counts them
    tracker_step: int  # the trackers' step of the row of its last step (warmup steps first, then RL)
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Receipt:
    """What a tracker that stores artifacts did with one: `stored`, and where (`reference`), or
    why not (`reason`)."""

    tracker: str
    stored: bool
    reference: str = ""
    reason: str = ""


@runtime_checkable
class Sink(Protocol):
    def start(self, info: RunInfo) -> None: ...

    def log_row(self, values: Mapping[str, float | int], step: int) -> None:
        """One row's numbers (`payload`), at `step` (never lower than the last row's)."""
        ...

    def log_artifact(self, artifact: ArtifactFolder) -> Receipt | None:
        """Store the artifact and say so, or None when this tracker stores none."""
        ...

    def finish(self, exit_code: int) -> None: ...


class NullSink:
    """What a run without trackers (and every rank but 0) logs to."""

    def start(self, info: RunInfo) -> None:
        return None

    def log_row(self, values: Mapping[str, float | int], step: int) -> None:
        return None

    def log_artifact(self, artifact: ArtifactFolder) -> Receipt | None:
        return None

    def finish(self, exit_code: int) -> None:
        return None


def payload(row: Mapping[str, Any], prefix: str = TRAIN_PREFIX) -> dict[str, float | int]:
    """`<prefix><key>` for every numeric field of a row but `step` (bools as 0/1); strings
    (condition, modes, digests) describe the run, they are not series."""
    out: dict[str, float | int] = {}
    for key, value in row.items():
        if key == "step":
            continue
        if isinstance(value, bool):
            out[prefix + key] = int(value)
        elif isinstance(value, int | float):
            out[prefix + key] = value
    return out


class TrackerMissing(UserError, RuntimeError):
    """A selected built-in tracker whose package is not installed."""

    def __init__(self, tracker: str, package: str, selected: str = "") -> None:
        selected = selected or f"[logging] trackers names {tracker!r}"
        super().__init__(f"{selected} but the `{package}` package is not installed "
                         f"({COMPONENTS[tracker].hint}, or drop it from trackers)")


def import_tracker(module: str, tracker: str, package: str, selected: str = "") -> ModuleType:
    """`module` of a built-in tracker's library, imported when its run starts."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise TrackerMissing(tracker, package, selected) from None
