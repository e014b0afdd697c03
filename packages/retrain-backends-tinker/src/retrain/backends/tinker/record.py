"""The Tinker backend's checkpoint folder: a record of where the service keeps the weights and
the optimizer state (`save_state`), in place of weight files. Torch-free: `retrain
resume-check` reads it through the backend definition (`check_record`)."""

from __future__ import annotations

import json
from pathlib import Path

from retrain.backends.catalog import RecordCheck

#: the record's file name in a checkpoint folder
CHECKPOINT = "tinker_checkpoint.json"


def check(path: Path) -> RecordCheck:
    """Complete when the record names a tinker:// state; whether the service still holds it
    shows only when the resumed run loads it."""
    file = path / CHECKPOINT
    try:
        record = json.loads(file.read_text())
        state = str(record["state_path"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return RecordCheck(findings=(("error", "checkpoint_incomplete", f"{file} is unreadable: {exc}"),))
    if not state.startswith("tinker://"):
        return RecordCheck(findings=(("error", "checkpoint_incomplete", f"{file} names no tinker:// state"),))
    return RecordCheck(
        facts={"remote_state": state, "base_model": record.get("base_model")},
        findings=(("info", "remote_checkpoint",
                   f"weights and optimizer state are {state} on the Tinker service ({record.get('service', '?')}); "
                   "the resumed run restores them with load_state_with_optimizer"),))
