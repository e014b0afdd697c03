"""Ray campaigns: each run is one Ray task reserving the run's `num_cpus` / `num_gpus`, on a
Ray instance started here (`ray_address` empty) or on the cluster `ray_address` names.

Contracts:
- Log and adapter dirs must be on a path every node sees (the campaign dir is resolved to an
  absolute path); tasks read their config from `configs/<run>.toml` there.
- The driver alone writes the manifest.
- A task whose worker process or node dies (a Ray system error, not an exception of the run)
  is submitted again, up to `max_retries` times; the new attempt finds the run's log dir and
  resumes from its last checkpoint. An exception inside the run fails it without retry: it
  would fail the same way again.
- Each task runs in a fresh worker process (`max_calls=1`), so no model, CUDA context or
  environment variable outlives its run.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrain.campaign.expand import Campaign, RunSpec
from retrain.campaign.manifest import ManifestFile
from retrain.campaign.parallel import POLL_S, progress
from retrain.campaign.progress import CampaignView
from retrain.config.schema import CampaignConfig
from retrain.errors import UserError
from retrain.registry.health import COMPONENTS

RAY_HINT = f"install the Ray extra: {COMPONENTS['ray'].hint} (or uv sync --extra ray)"
_CRASH = "RETRAIN_CRASH_AT"
UV_HOOK = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"


def run_task(config_path: str, import_roots: list[str], cwd: str, crash_at: str) -> dict[str, str]:
    """One run inside a Ray worker: load and validate its config there, train or resume it."""
    import msgspec

    from retrain.campaign.worker import resume_from
    from retrain.training.console import SilentReporter
    from retrain.training.trainers import train
    from retrain.validation.load import load_config

    sys.path[:0] = [r for r in import_roots if r not in sys.path]
    if os.path.isdir(cwd):
        os.chdir(cwd)
    if crash_at:
        os.environ[_CRASH] = crash_at
    else:
        os.environ.pop(_CRASH, None)
    try:
        config = load_config(config_path).config
        config = msgspec.structs.replace(config, resume=msgspec.structs.replace(
            config.resume, from_=resume_from(Path(config.logging.log_dir))))
        train(config, SilentReporter(), config_path=config_path)
    except Exception as exc:
        return {"status": "failed", "error": f"exception:{type(exc).__name__}: {exc}"}
    return {"status": "finished", "error": ""}


def _ray() -> Any:
    # Under `uv run`, Ray ships the current directory to every worker as its working_dir and
    # starts the workers with `uv run`. A campaign's directory usually holds logs/ and adapters/
    # (gigabytes; a session dir below it even zips itself), and the contract here is the same
    # environment on every node with the campaign on a shared path, so that is off unless the
    # user turns it on (read when Ray is imported).
    os.environ.setdefault(UV_HOOK, "0")
    try:
        import ray
    except ImportError:
        raise UserError("[campaign] executor = \"ray\" needs Ray, which is not installed", hint=RAY_HINT) from None
    return ray


@dataclass
class Task:
    run: RunSpec
    ref: Any


def _connect(ray: Any, settings: CampaignConfig) -> bool:
    """Join `ray_address`, or start a local Ray instance; True when this call started Ray."""
    if ray.is_initialized():
        return False
    try:
        ray.init(address=settings.ray_address or None, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    except ConnectionError as exc:
        raise UserError(f"[campaign] ray_address = {settings.ray_address!r}: {exc}",
                        hint='leave ray_address empty to start a local Ray instance, or "auto" to join '
                             "the cluster this machine belongs to") from None
    return True


class _InFlight:
    """The campaign's Ray tasks in flight, by object ref; each submission is one manifest attempt."""

    def __init__(self, ray: Any, campaign: Campaign, manifest: ManifestFile, view: CampaignView) -> None:
        self.ray, self.campaign, self.manifest, self.view = ray, campaign, manifest, view
        self.remote = ray.remote(max_calls=1, max_retries=0)(run_task).options(
            num_cpus=campaign.settings.num_cpus, num_gpus=campaign.settings.num_gpus)
        self.crash = os.environ.get(_CRASH, "")
        self.target = os.environ.get("RETRAIN_CRASH_RUN")
        self.tasks: dict[Any, Task] = {}

    def submit(self, run: RunSpec) -> None:
        self.manifest.started(run.name)
        attempt = self.manifest.entry(run.name).attempts
        self.view.started(run.name, attempt)
        fault = self.crash if attempt == 1 and (self.target is None or self.target == run.name) else ""
        task = Task(run, self.remote.remote(str(self.campaign.config_path(run)), self.campaign.import_roots,
                                            os.getcwd(), fault))
        self.tasks[task.ref] = task

    def collect(self, ref: Any) -> None:
        """Record a finished task's result, or submit its run again when its worker was lost."""
        task = self.tasks.pop(ref)
        result = self._result(task)
        if result is not None:
            self.manifest.ended(task.run.name, result["status"], result["error"])
            self.view.ended(task.run.name, result["status"], result["error"])

    def _result(self, task: Task) -> dict[str, str] | None:
        """None: the run was submitted again."""
        name = task.run.name
        try:
            result: dict[str, str] = self.ray.get(task.ref)
        except self.ray.exceptions.RayTaskError as exc:
            return {"status": "failed", "error": str(exc).splitlines()[0]}
        except self.ray.exceptions.RayError as exc:
            attempts = self.manifest.entry(name).attempts
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
            if attempts <= self.campaign.settings.max_retries:
                self.view.message(f"{name}: attempt {attempts} lost its worker ({reason}); resuming "
                                  f"from its last checkpoint")
                self.submit(task.run)
                return None
            return {"status": "failed", "error": f"worker lost {attempts} times; last: {reason}"}
        return result

    def cancel_all(self) -> None:
        for task in self.tasks.values():
            self.ray.cancel(task.ref, force=True)
            self.manifest.ended(task.run.name, "interrupted", "interrupted", None)


def run_on_ray(campaign: Campaign, runs: list[RunSpec], manifest: ManifestFile, view: CampaignView) -> None:
    ray = _ray()
    started_here = _connect(ray, campaign.settings)
    flight = _InFlight(ray, campaign, manifest, view)
    limit = campaign.settings.max_workers or len(runs)
    pending = list(runs)
    try:
        while pending or flight.tasks:
            while pending and len(flight.tasks) < limit:
                flight.submit(pending.pop(0))
            ready, _ = ray.wait(list(flight.tasks), num_returns=1, timeout=POLL_S)
            for task in flight.tasks.values():
                progress(view, task.run, campaign.max_steps)
            for ref in ready:
                flight.collect(ref)
    except KeyboardInterrupt:
        flight.cancel_all()
        raise
    finally:
        if started_here:
            ray.shutdown()
