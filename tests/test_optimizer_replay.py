"""Capture one optimizer step on the tiny model, then replay it: the same loss and the same
weight bytes; a tampered artifact is refused naming the file, and a config that differs
outside the allow-list naming the key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retrain.io.log import read_jsonl

pytestmark = pytest.mark.slow

REWARD = '''
def score(response, reference):
    return min(1.0, sum(ch.isdigit() for ch in response) / 4)
'''


def write(root: Path, name: str, extra: str = "", lr: float = 1e-2) -> Path:
    (root / "toy_reward.py").write_text(REWARD)
    cfg = root / f"{name}.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
lora_rank = 4
[backend]
devices = "cpu"
adapter_path = "{root / name / 'adapters'}"
[training]
seed = 0
max_steps = 1
batch_size = 2
group_size = 4
max_tokens = 8
temperature = 1.0
lr = {lr}
save_every = 0
{extra}
[data]
source = "arithmetic"
[reward]
type = "custom"
custom_module = "toy_reward"
[logging]
log_dir = "{root / name / 'logs'}"
""")
    return cfg


def retrain(cfg: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg)], cwd=cfg.parent, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def replay_config(root: Path, name: str, manifest: str, pins: dict[str, str], lr: float = 1e-2) -> Path:
    lines = (f'trainer = "optimizer_replay"\n[optimizer_batch]\nreplay_path = "{manifest}"\n'
             f'expected_manifest_sha256 = "{pins["manifest_sha256"]}"\n'
             f'expected_logical_sha256 = "{pins["logical_sha256"]}"\n')
    return write(root, name, lines, lr=lr)


def test_capture_then_replay_is_bit_exact(tmp_path: Path) -> None:
    res = retrain(write(tmp_path, "capture", "[optimizer_batch]\ncapture = true"))
    assert res.returncode == 0, res.stderr
    row = read_jsonl(tmp_path / "capture" / "logs" / "metrics.jsonl")[0]
    manifest = row["optimizer_batch/manifest"]
    pins = {k: row[f"optimizer_batch/{k}"] for k in ("manifest_sha256", "logical_sha256")}
    captured = json.loads(Path(manifest).read_text())
    assert captured["loss"] == row["loss"] and captured["datums"] == row["num_datums"] > 0
    assert pins["manifest_sha256"] in res.stdout  # printed for the user to pin

    res = retrain(replay_config(tmp_path, "replay", manifest, pins))
    assert res.returncode == 0, res.stderr
    report = json.loads((tmp_path / "replay" / "logs" / "optimizer_batch_replay_manifest.json").read_text())
    assert report["replayed_loss"] == report["captured_loss"] == row["loss"]
    assert report["loss_equal"] and report["weights_equal"]
    replayed = tmp_path / "replay" / "adapters" / "final" / "adapter_model.safetensors"
    assert replayed.read_bytes() == (tmp_path / "capture" / "adapters" / "final" / "adapter_model.safetensors").read_bytes()

    res = retrain(replay_config(tmp_path, "other_lr", manifest, pins, lr=2e-2))
    assert res.returncode == 2 and "[training] lr: 0.01 when captured, 0.02 here" in res.stderr

    batch = Path(manifest).with_name("optimizer_batch_step_000000") / "batch.json"
    batch.write_bytes(batch.read_bytes().replace(b'"lr":0.01', b'"lr":0.02'))
    res = retrain(replay_config(tmp_path, "tampered", manifest, pins))
    assert res.returncode == 2 and f"{batch}: sha256 does not match the manifest" in res.stderr
    assert "Traceback" not in res.stderr
