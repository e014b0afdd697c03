"""End-to-end multi-process runs: `devices = "cpu,cpu"` makes `retrain` launch itself under
torchrun with two processes (gloo, FSDP2) on the tiny model. One run directory, written by
rank 0, with world_size recorded; SIGKILL of one rank followed by --resume reproduces the
uninterrupted run bit for bit (wall-clock fields aside), as a single-process resume does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_training_run import outputs, write_run

from retrain.io.log import read_jsonl

pytestmark = pytest.mark.slow

SETTINGS = {"max_steps": 3, "batch_size": 3, "group_size": 2, "sft_warmup_steps": 1, "save_every": 1}
EVAL = {"every": 2, "k": 2, "before_train": False}


def two_process_run(root: Path) -> Path:
    cfg = write_run(root, EVAL, **SETTINGS)
    cfg.write_text(cfg.read_text().replace('devices = "cpu"', 'devices = "cpu,cpu"'))
    return cfg


def retrain(cfg: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg), *args], cwd=cfg.parent, env=full,
                          capture_output=True, text=True, timeout=900, check=False)


@pytest.fixture(scope="session")
def reference(build_once) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """The uninterrupted two-process run, built once per session (shared by the xdist
    workers) in `run/`, its output beside it."""

    def train(folder: Path) -> None:
        root = folder / "run"
        root.mkdir()
        res = retrain(two_process_run(root))
        (folder / "stdout.log").write_text(res.stdout)
        (folder / "stderr.log").write_text(res.stderr)
        assert res.returncode == 0, res.stderr[-3000:]

    folder = build_once("distributed-run-uninterrupted", train)
    root = folder / "run"
    return {"root": root, "stdout": (folder / "stdout.log").read_text(),
            "stderr": (folder / "stderr.log").read_text(), **outputs(root)}


def test_two_processes_write_one_run_directory(reference: dict[str, object]) -> None:
    root = Path(str(reference["root"]))
    assert "training on 2 processes" in str(reference["stderr"])
    assert sorted(p.name for p in root.iterdir()) == ["adapters", "logs", "run.toml", "toy_reward.py"]
    rows = read_jsonl(root / "logs" / "metrics.jsonl")
    assert [(r.get("phase", "rl"), r["step"]) for r in rows] == [("sft", 0), ("rl", 0), ("rl", 1), ("rl", 2)]
    assert {r["world_size"] for r in rows} == {2}
    generations = read_jsonl(root / "logs" / "emergence" / "generations.jsonl")
    for step in range(3):  # every prompt of the step, sampled on one rank or the other
        assert len({g["prompt"] for g in generations if g["step"] == step}) == SETTINGS["batch_size"]
    assert {r["local_sharded_layers"] for r in rows} == {4}
    meta = json.loads((root / "logs" / "run_meta.json").read_text())
    assert meta["world_size"] == 2 and meta["status"] == "succeeded"
    # one line per step in each log: rank 1 wrote nothing
    assert len(read_jsonl(root / "logs" / "emergence" / "steps.jsonl")) == 3
    assert [r["step"] for r in read_jsonl(root / "logs" / "eval.jsonl")] == [2, 3]
    names = sorted(p.name for p in (root / "adapters").iterdir())
    assert names == ["checkpoint_step_1", "checkpoint_step_2", "checkpoint_step_3", "final", "run_owner.json",
                     "warmup_step_1"], names


def test_checkpoint_loads_in_one_process(reference: dict[str, object]) -> None:
    """The final adapter loads with peft; a two-process checkpoint resumes a one-process backend."""
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file

    from retrain.backends.local.backend import LocalBackend
    from retrain.models.load import ModelSpec, load_model
    from retrain.validation.load import load_config

    root = Path(str(reference["root"]))
    final = root / "adapters" / "final"
    peft_model = PeftModel.from_pretrained(load_model(ModelSpec("tiny"), seed=0), str(final))
    saved = load_file(str(final / "adapter_model.safetensors"))
    assert saved and all(torch.isfinite(t).all() for t in saved.values())
    assert any(name.endswith("lora_B.default.weight") and float(p.abs().sum()) > 0
               for name, p in peft_model.named_parameters())
    config = load_config(str(root / "run.toml"), ["--devices", "cpu"], import_plugins=False).config
    backend = LocalBackend(config)
    backend.load_checkpoint(str(root / "adapters" / "checkpoint_step_3"))
    ckpt = load_file(str(root / "adapters" / "checkpoint_step_3" / "adapter_model.safetensors"))
    got = {n.replace(".default.", "."): p for n, p in backend.model.named_parameters() if p.requires_grad}
    assert set(ckpt) == set(got)
    assert all(torch.equal(ckpt[k], got[k].detach()) for k in ckpt)
    assert backend.optimizer.state  # the optimizer's moments came back too


def test_sigkill_of_one_rank_then_resume_is_bit_identical(reference: dict[str, object], tmp_path: Path) -> None:
    cfg = two_process_run(tmp_path)
    killed = retrain(cfg, env={"RETRAIN_CRASH_AT": "after_step@1", "RETRAIN_CRASH_RANK": "1"})
    assert killed.returncode != 0
    rows = read_jsonl(tmp_path / "logs" / "metrics.jsonl")
    assert max(r["step"] for r in rows if r.get("phase") != "sft") < 2  # it did die mid-run
    resumed = retrain(cfg, "--resume", str(tmp_path / "logs"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got = outputs(tmp_path)
    for key in ("metrics", "steps", "generations", "eval", "eval_problems", "adapter"):
        assert got[key] == reference[key], key
