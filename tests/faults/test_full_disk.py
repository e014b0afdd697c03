"""A disk that fills while a run saves: the checkpoint being written fails, named with the free
space left, nothing of it is left behind (its space is free again), the run ends `failed` with
status 1, the checkpoints before it are whole, and once there is room the resumed run ends
bit-identical to one that never ran out.

The full disk is real: the adapter folder is a small tmpfs mounted in a mount namespace of
the run's own (`unshare`), sized to hold two of the run's checkpoints and not three. Where the
machine allows no namespace (a container without user namespaces) the test is skipped, saying so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fault_run import meta, signalling_run
from tiny_run import ENV, Messages, retrain

from retrain.io.log import read_jsonl
from retrain.training.integrity import damage
from retrain.training.trainers import train
from retrain.validation.load import load_config

pytestmark = pytest.mark.slow

NAMESPACE = ["unshare", "--map-root-user", "--mount"]


def _namespaces() -> str:
    """Why this machine cannot give a run a small disk of its own, or ""."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = subprocess.run([*NAMESPACE, "true"], capture_output=True, text=True, check=False)
    return "" if probe.returncode == 0 else f"no user and mount namespaces here ({probe.stderr.strip()})"


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_a_full_disk_fails_the_checkpoint_loses_nothing_and_resumes_exactly(in_root: Path) -> None:
    if why := _namespaces():
        pytest.skip(why)
    plain = signalling_run(in_root, "plain")
    train(load_config(plain, [], import_plugins=False).config, Messages())
    one = folder_bytes(in_root / "plain" / "adapters" / "checkpoint_step_1")
    cut = signalling_run(in_root, "cut")
    adapters, kept = in_root / "cut" / "adapters", in_root / "kept"
    adapters.mkdir(parents=True)
    kept.mkdir()
    script = (f"mount -t tmpfs -o size={int(one * 2.5)} tmpfs {adapters} && "
              f"{sys.executable} -m retrain.cli {cut}; echo $? > {in_root / 'rc'}; cp -a {adapters}/. {kept}/")
    full = subprocess.run([*NAMESPACE, "sh", "-c", script], cwd=in_root, env={**os.environ, **ENV},
                          capture_output=True, text=True, timeout=900, check=False)
    assert (in_root / "rc").read_text().strip() == "1", full.stderr[-3000:]
    # torch.save reports the full disk as "unexpected pos"; the run names the checkpoint and the free space
    (line,) = [line for line in full.stderr.splitlines() if line.startswith("Training failed")]
    assert line.startswith(f"Training failed (exception:CheckpointNotSaved): checkpoint {adapters / 'checkpoint_step_3'} "
                           "was not saved ("), line
    assert f"MB free on its file system; the run's latest checkpoint is {adapters / 'checkpoint_step_2'}, whole" in line
    logs = in_root / "cut" / "logs"
    assert meta(logs)["status"] == "failed" and meta(logs)["failure_status"] == "exception:CheckpointNotSaved"
    state = json.loads((logs / "trainer_state.json").read_text())
    saved = sorted(p.name for p in kept.iterdir() if p.is_dir())
    assert saved == ["checkpoint_step_1", "checkpoint_step_2"], saved  # the third's partial folder is gone
    assert state["checkpoint_name"] == "checkpoint_step_2" and not damage(kept / "checkpoint_step_2")
    assert len(read_jsonl(logs / "metrics.jsonl")) == 3  # step 2's row, its checkpoint failed

    shutil.copytree(kept, adapters, dirs_exist_ok=True)  # room again: the folder on the real disk
    resumed = retrain(cut, "--resume", str(logs))
    assert resumed.returncode == 0, resumed.stderr
    final = "adapters/final/adapter_model.safetensors"
    assert (in_root / "cut" / final).read_bytes() == (in_root / "plain" / final).read_bytes()
    assert len(read_jsonl(logs / "metrics.jsonl")) == 4
