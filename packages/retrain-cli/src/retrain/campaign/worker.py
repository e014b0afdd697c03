"""One run of a campaign, wherever it executes: whether it already finished, how it starts
(fresh, or resumed from its log dir), and the outcome the driver records.

A run is resumed whenever its log dir exists: the trainer then continues from the last
checkpoint (or starts over from step 0 when none was written), dropping log rows written
after that checkpoint, so the finished run equals an uninterrupted one bit for bit.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from retrain.campaign.expand import Campaign, RunSpec
from retrain.campaign.progress import CampaignView
from retrain.io import layout
from retrain.io.json import load_json_object
from retrain.training import faults
from retrain.training.interrupt import RunInterrupted


@dataclass(frozen=True)
class Outcome:
    status: str  # finished | failed | interrupted
    error: str = ""
    returncode: int | None = None


def finished(log_dir: Path) -> bool:
    state = load_json_object(log_dir / layout.TRAINER_STATE) or {}
    return state.get("checkpoint_name") == layout.FINAL


def resume_from(log_dir: Path) -> str:
    """The log dir when it holds a (partial) run to resume, else "" for a fresh start."""
    metrics = log_dir / layout.METRICS
    started = (log_dir / layout.TRAINER_STATE).exists() or (metrics.exists() and metrics.stat().st_size > 0)
    return str(log_dir) if started else ""


def worker_command(campaign: Campaign, run: RunSpec) -> list[str]:
    """The worker process of a parallel campaign: the ordinary `retrain FILE` of that run."""
    resume = resume_from(run.log_dir)
    return [sys.executable, "-m", "retrain.cli", str(campaign.config_path(run)),
            *(["--resume", resume] if resume else [])]


def worker_environ(campaign: Campaign, run: RunSpec, environ: Mapping[str, str]) -> dict[str, str]:
    env = faults.run_environ(run.name, environ)
    env["PYTHONPATH"] = os.pathsep.join([*campaign.import_roots, *filter(None, [env.get("PYTHONPATH", "")])])
    return env


@contextlib.contextmanager
def scoped_environ(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


class ViewReporter:
    """The trainer's Reporter for a run trained in the driver's process: steps go to the view."""

    def __init__(self, view: CampaignView, name: str) -> None:
        self.view, self.name = view, name

    def start(self, info: Mapping[str, Any]) -> None: ...

    def warmup(self, step: int, total: int, row: Mapping[str, Any]) -> None: ...

    def step(self, step: int, total: int, row: Mapping[str, Any]) -> None:
        self.view.step(self.name, step, total, row.get("mean_reward"))

    def sft(self, step: int, total: int, row: Mapping[str, Any]) -> None:
        self.view.step(self.name, step, total, None)

    def message(self, text: str) -> None:
        self.view.message(f"{self.name}: {text}")

    def finish(self, summary: Mapping[str, Any]) -> None: ...


def train_in_process(run: RunSpec, reporter: Any, config_path: str) -> Outcome:
    """Train (or resume) one run in this process; an exception becomes a failed outcome."""
    from retrain.training.trainers import train

    config = msgspec.structs.replace(run.config, resume=msgspec.structs.replace(
        run.config.resume, from_=resume_from(run.log_dir)))
    try:
        with scoped_environ(faults.run_environ(run.name, os.environ)):
            train(config, reporter, config_path=config_path)
    except KeyboardInterrupt:
        return Outcome("interrupted", "interrupted")
    except RunInterrupted as exc:  # a Ctrl-C or a scheduler's SIGTERM: the run saved; the campaign stops too
        return Outcome("interrupted", str(exc))
    except Exception as exc:
        if os.environ.get("RETRAIN_DEBUG"):
            raise
        return Outcome("failed", f"exception:{type(exc).__name__}: {exc}")
    return Outcome("finished")


def error_from_log(path: Path, limit: int = 8192) -> str:
    """The failure a worker printed last: its `error:` line, else its last line."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - limit))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    for line in reversed(lines):
        if line.startswith(("error:", "Training failed")):
            return line.removeprefix("error:").strip()
    return lines[-1] if lines else ""
