"""Which trackers a config selects, built through the registry's `tracker` kind and started."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from retrain.config.schema import TrainConfig
from retrain.config.snapshot import sections_snapshot
from retrain.errors import RunStopped, UserError
from retrain.registry.core import lookup
from retrain.training.trackers.fanout import Trackers
from retrain.training.trackers.sink import RunInfo, Sink

#: The project (trackio) or experiment (MLflow) a run goes to when the config names none.
DEFAULT_PROJECT = "retrain"


class TrackerPluginError(UserError, TypeError):
    """A tracker factory that did not return a sink."""


def project(config: TrainConfig) -> str:
    """The project of trackers other than W&B: `tracker_project`, else `wandb_project`, else
    "retrain"."""
    log = config.logging
    return log.tracker_project or log.wandb_project or DEFAULT_PROJECT


def run_info(config: TrainConfig, condition: str = "") -> RunInfo:
    log_dir = config.logging.log_dir
    folder = os.path.basename(os.path.abspath(log_dir)) if log_dir else ""
    return RunInfo(name=folder or condition, log_dir=Path(os.path.abspath(log_dir or ".")),
                   trainer=config.training.trainer, condition=condition, config=sections_snapshot(config))


def build_trackers(config: TrainConfig) -> Trackers:
    """The selected trackers, built (nothing imported yet) but not started."""
    sinks: list[tuple[str, Sink]] = []
    for name in config.logging.tracker_names():
        factory = lookup("tracker", name, config.plugins.search_paths).obj
        sink = factory(config)
        if not isinstance(sink, Sink):
            raise TrackerPluginError(f"[logging] trackers: {name!r} returned {type(sink).__name__}, which lacks "
                                     "start / log_row / log_artifact / finish (retrain.training.trackers.sink.Sink)")
        sinks.append((name, sink))
    return Trackers(sinks)


def open_trackers(config: TrainConfig, condition: str = "") -> Trackers:
    """The selected trackers, started for this run."""
    trackers = build_trackers(config)
    trackers.start(run_info(config, condition))
    return trackers


@contextmanager
def tracking(config: TrainConfig, condition: str = "") -> Iterator[Trackers]:
    """The selected trackers for the block, for a trainer that keeps no run log (command,
    optimizer_replay): started, and finished with the block's exit code (0; a stop's own code;
    130 for an interrupt; else 1)."""
    trackers = open_trackers(config, condition)
    try:
        yield trackers
    except BaseException as exc:
        code = exc.exit_code if isinstance(exc, RunStopped) else 130 if isinstance(exc, KeyboardInterrupt) else 1
        trackers.finish(code)
        raise
    trackers.finish(0)
