"""The audit files of a standalone SFT run (spec config-cli.md §10.3), in its log directory:

- `resolved_config.json`: every config field as the run used it (secrets redacted);
- `sft_data.snapshot.jsonl`: a byte copy of the data when it is at most 16 MiB, verified
  against the sha256 read at the start;
- `sft_data_recoverability.json`: whether the exact data can be found again (the snapshot, or
  the source path with its git status) and why;
- `sft_manifest.json`, also written into the final weights' folder as
  `retrain_sft_manifest.json`: data identity, schedule, caps, steps and losses.

The first three are written when the run starts (before any training), the manifest when it ends.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.config.snapshot import config_snapshot
from retrain.io.atomic import write_json_atomic
from retrain.io.digest import file_sha256
from retrain.io.layout import (
    SFT_DATA_SNAPSHOT,
    SFT_FINAL_MANIFEST,
    SFT_MANIFEST,
    SFT_RECOVERABILITY,
    SFT_RESOLVED_CONFIG,
)
from retrain.training.sft.records import SftData, sft_cap
from retrain.training.state import SftSchedule

SNAPSHOT_MAX_BYTES = 16 * 1024 * 1024
SCHEMA_VERSION = 1


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _source(data: SftData) -> dict[str, Any]:
    path = data.path.resolve()
    root = _git(path.parent, "rev-parse", "--show-toplevel")
    tracked = root is not None and _git(path.parent, "ls-files", "--error-unmatch", path.name) is not None
    return {"source_path": str(path), "source_sha256": data.sha256, "source_rows": len(data.rows),
            "source_bytes": data.size, "path_status": "exists" if path.is_file() else "missing",
            "git_root": root, "git_tracked": tracked}


def write_start(config: TrainConfig, data: SftData, log_dir: Path) -> None:
    write_json_atomic(log_dir / SFT_RESOLVED_CONFIG, config_snapshot(config))
    copied, reason = False, ""
    snapshot = log_dir / SFT_DATA_SNAPSHOT
    if data.size > SNAPSHOT_MAX_BYTES:
        reason = f"the data ({data.size} bytes) is larger than the snapshot limit ({SNAPSHOT_MAX_BYTES})"
    else:
        tmp = snapshot.with_suffix(".tmp")
        shutil.copyfile(data.path, tmp)
        if file_sha256(tmp) != data.sha256:
            tmp.unlink()
            reason = "the data changed while it was copied"
        else:
            tmp.replace(snapshot)
            copied = True
    source = _source(data)
    recoverable = copied or bool(source["git_tracked"])
    if recoverable and not reason:
        reason = "snapshot copied" if copied else "source tracked by git"
    elif not recoverable and not reason:
        reason = "no snapshot and the source is not tracked by git"
    write_json_atomic(log_dir / SFT_RECOVERABILITY, {
        "schema_version": SCHEMA_VERSION, "kind": "sft_data", **source, "snapshot_max_bytes": SNAPSHOT_MAX_BYTES,
        "copied": copied, "snapshot_path": str(snapshot) if copied else None, "recoverable": recoverable,
        "reason": reason})


def write_manifest(config: TrainConfig, data: SftData, log_dir: Path, final: Path, schedule: SftSchedule | None,
                   summary: dict[str, Any]) -> None:
    t = config.training
    manifest = {
        "schema_version": SCHEMA_VERSION, "trainer": "sft", "model": config.model.model,
        "data": {**data.provenance(), "kinds": sorted({r.kind for r in data.rows})},
        "schedule": None if schedule is None else {"seed": schedule.seed, "order": schedule.order,
                                                   "batch_size": schedule.batch_size,
                                                   "length_bucket_size": t.sft_length_bucket_size,
                                                   "reshuffle_each_epoch": t.sft_reshuffle_each_epoch},
        "max_tokens": sft_cap(config), "steps": t.max_steps, "lr": t.sft_lr or t.lr,
        "loss_fn": "cross_entropy" if t.sft_loss_fn == "auto" else t.sft_loss_fn,
        "first_loss": summary.get("first_loss"), "last_loss": summary.get("last_loss"),
        "final_weights": str(final),
    }
    write_json_atomic(log_dir / SFT_MANIFEST, manifest)
    write_json_atomic(final / SFT_FINAL_MANIFEST, manifest)
