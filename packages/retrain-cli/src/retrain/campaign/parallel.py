"""Parallel campaigns: each run is a worker process running `retrain <run config>` (resumed
with `--resume` when its log dir exists), at most `max_workers` at once, launches
`stagger_seconds` apart. Workers write their own run directories; the driver alone writes
the manifest and polls each worker's metrics for the progress view."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import IO, Any

from retrain.campaign.expand import Campaign, RunSpec
from retrain.campaign.manifest import ManifestFile
from retrain.campaign.progress import CampaignView
from retrain.campaign.worker import error_from_log, finished, worker_command, worker_environ
from retrain.io import layout
from retrain.metrics.scan import number, read_tail

POLL_S = 0.5
TERMINATE_WAIT_S = 10.0


@dataclass
class Worker:
    run: RunSpec
    process: subprocess.Popen[bytes]
    files: tuple[IO[Any], IO[Any]]


def progress(view: CampaignView, run: RunSpec, total: int) -> None:
    """The run's newest RL metrics row, read from the end of its metrics file."""
    last = read_tail(run.log_dir / layout.METRICS, 1).last
    if last and last.get("phase") != "sft" and isinstance(last.get("step"), int):
        view.step(run.name, last["step"], total, number(last.get("mean_reward")))


def _launch(campaign: Campaign, run: RunSpec) -> Worker:
    run.log_dir.mkdir(parents=True, exist_ok=True)
    out = (run.log_dir / layout.STDOUT).open("ab")
    err = (run.log_dir / layout.STDERR).open("ab")
    process = subprocess.Popen(worker_command(campaign, run), stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                               env=worker_environ(campaign, run, os.environ))
    return Worker(run, process, (out, err))


def _outcome(worker: Worker, code: int) -> tuple[str, str]:
    if code == 0 and finished(worker.run.log_dir):
        return "finished", ""
    if code < 0:
        return "failed", f"killed by signal {signal.Signals(-code).name}"
    return "failed", error_from_log(worker.run.log_dir / layout.STDERR) or f"exit status {code}"


def run_parallel(campaign: Campaign, runs: list[RunSpec], manifest: ManifestFile, view: CampaignView) -> None:
    settings = campaign.settings
    limit = settings.max_workers or len(runs)
    pending = list(runs)
    active: dict[str, Worker] = {}
    last_launch = float("-inf")
    try:
        while pending or active:
            while pending and len(active) < limit and time.monotonic() - last_launch >= settings.stagger_seconds:
                run = pending.pop(0)
                manifest.started(run.name)
                active[run.name] = _launch(campaign, run)
                view.started(run.name, manifest.entry(run.name).attempts)
                last_launch = time.monotonic()
            for name, worker in list(active.items()):
                code = worker.process.poll()
                progress(view, worker.run, campaign.max_steps)
                if code is None:
                    continue
                for f in worker.files:
                    f.close()
                del active[name]
                status, error = _outcome(worker, code)
                manifest.ended(name, status, error, code)
                view.ended(name, status, error)
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        _stop(list(active.values()), manifest)
        raise


def _stop(workers: list[Worker], manifest: ManifestFile) -> None:
    for w in workers:
        w.process.terminate()
    deadline = time.monotonic() + TERMINATE_WAIT_S
    for w in workers:
        try:
            w.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.process.kill()
            w.process.wait()
        for f in w.files:
            f.close()
        manifest.ended(w.run.name, "interrupted", "interrupted", None)
