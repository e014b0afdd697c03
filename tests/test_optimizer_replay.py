"""Capture one optimizer step on the tiny model, then replay it: the same loss and the same
weight bytes; a tampered artifact is refused naming the file, and a config that differs
outside the allow-list naming the key."""

from __future__ import annotations

import json
from pathlib import Path

from tiny_run import retrain, write_tiny_run

from retrain.io.log import read_jsonl

# in this process (tiny_run.retrain, or the trainer itself): seconds, so the fast tier


def replay_config(root: Path, name: str, manifest: str, pins: dict[str, str], lr: float = 1e-2) -> Path:
    return write_tiny_run(root, name, training={"trainer": "optimizer_replay", "max_steps": 1, "lr": lr},
                          tables={"optimizer_batch": {"replay_path": manifest,
                                                      "expected_manifest_sha256": pins["manifest_sha256"],
                                                      "expected_logical_sha256": pins["logical_sha256"]}})


def test_capture_then_replay_is_bit_exact(tmp_path: Path) -> None:
    res = retrain(write_tiny_run(tmp_path, "capture", training={"max_steps": 1},
                                 tables={"optimizer_batch": {"capture": True}}))
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
