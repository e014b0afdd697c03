"""`manifest.json`: a campaign's index of its runs, written only by the campaign's driver,
atomically, whenever a run starts or ends, so `retrain status`, `top` and `diff` read a
whole file at any moment (even after SIGKILL).

The reference's keys keep their names and meaning (`runs[].returncode` non-zero = failed);
each run also records its status (pending, running, finished, failed, interrupted), its
error, its adapter dir, its config's fingerprint (a resumed campaign refuses a changed
config) and how many attempts it took.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import msgspec

from retrain.campaign.expand import Campaign, RunSpec
from retrain.errors import UserError
from retrain.io import layout
from retrain.io.atomic import write_bytes_atomic

STATUSES = ("pending", "running", "finished", "failed", "interrupted")


class RunEntry(msgspec.Struct, kw_only=True, omit_defaults=True):
    condition: str
    advantage_mode: str
    transform_mode: str
    overrides: dict[str, Any]
    seed: int
    run_name: str
    log_dir: str
    adapter_path: str
    config_path: str
    fingerprint: str
    status: str = "pending"
    returncode: int | None = None
    error: str = ""
    attempts: int = 0
    started_at: str = ""
    finished_at: str = ""


class Manifest(msgspec.Struct, kw_only=True, omit_defaults=True):
    timestamp: str
    campaign_toml: str
    conditions: list[str]
    seeds: list[int]
    max_steps: int
    parallel: bool
    executor: str
    num_runs: int
    runner_pid: int
    runs: list[RunEntry]
    squeeze: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ManifestFile:
    """The manifest of one campaign directory and the driver's updates to it."""

    def __init__(self, campaign: Campaign) -> None:
        self.path = campaign.dir / layout.CAMPAIGN_MANIFEST
        self.campaign = campaign
        previous = self._read()
        entries = {e.run_name: e for e in previous.runs} if previous else {}
        if previous:
            _check_same_runs(campaign, entries, self.path)
        s = campaign.settings
        self.data = Manifest(
            timestamp=previous.timestamp if previous else time.strftime("%Y%m%d_%H%M%S", time.gmtime()),
            campaign_toml=str(campaign.file),
            conditions=campaign.conditions,
            seeds=list(s.seeds),
            max_steps=campaign.max_steps,
            parallel=s.parallel,
            executor=s.executor,
            num_runs=len(campaign.runs),
            runner_pid=os.getpid(),
            runs=[entries.get(r.name) or _entry(campaign, r) for r in campaign.runs],
            squeeze=previous.squeeze if previous else None,
        )
        self.resumed = previous is not None

    def _read(self) -> Manifest | None:
        try:
            return msgspec.json.decode(self.path.read_bytes(), type=Manifest)
        except FileNotFoundError:
            return None
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise UserError(f"{self.path} is not a campaign manifest retrain can resume ({exc})",
                            hint="choose another [logging] log_dir for the campaign, or delete the folder") from None

    def entry(self, name: str) -> RunEntry:
        return next(e for e in self.data.runs if e.run_name == name)

    def update(self, name: str, **fields: Any) -> None:
        entry = self.entry(name)
        for key, value in fields.items():
            setattr(entry, key, value)
        self.save()

    def save(self) -> None:
        write_bytes_atomic(self.path, msgspec.json.format(msgspec.json.encode(self.data), indent=2) + b"\n")

    def started(self, name: str) -> None:
        entry = self.entry(name)
        self.update(name, status="running", returncode=None, error="", attempts=entry.attempts + 1,
                    started_at=now_iso(), finished_at="")

    def ended(self, name: str, status: str, error: str = "", returncode: int | None = None) -> None:
        if returncode is None and status in ("finished", "failed"):
            returncode = 0 if status == "finished" else 1
        self.update(name, status=status, error=error, returncode=returncode, finished_at=now_iso())


def _entry(campaign: Campaign, run: RunSpec) -> RunEntry:
    c = run.condition
    return RunEntry(condition=c.label, advantage_mode=c.advantage_mode, transform_mode=c.transform_mode,
                    overrides=c.overrides, seed=run.seed, run_name=run.name, log_dir=str(run.log_dir),
                    adapter_path=str(run.adapter_path), config_path=str(campaign.config_path(run)),
                    fingerprint=run.fingerprint)


def _check_same_runs(campaign: Campaign, previous: dict[str, RunEntry], path: Path) -> None:
    """A campaign directory resumes only the campaign that made it: same runs, same configs."""
    planned = {r.name: r for r in campaign.runs}
    changed = sorted(n for n, r in planned.items() if n in previous and previous[n].fingerprint != r.fingerprint)
    added = sorted(set(planned) - set(previous))
    dropped = sorted(set(previous) - set(planned))
    if not (changed or added or dropped):
        return
    what = "; ".join(f"{label}: {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
                     for label, names in (("config changed", changed), ("new runs", added),
                                          ("runs no longer listed", dropped)) if names)
    raise UserError(f"{path.parent} holds another campaign than {campaign.file} describes now ({what})",
                    hint="set another [logging] log_dir for the changed campaign, or delete the folder to start over")
