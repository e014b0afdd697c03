"""End-to-end runs of the trainer on the tiny model through the real `retrain` command,
including SIGKILL at chosen points followed by --resume: the resumed run's logs (held-out
evaluations included) and final adapter must be bit-identical to an uninterrupted run's
(wall-clock fields aside). The run evaluates after every step; the same run without `[eval]`
trains identically.

Tiers: the uninterrupted run is built once per session (shared by the xdist workers) and the
tests that only read it are the fast tier's end-to-end training run through the real command
(core, kernels, the local backend, the CLI); every test that trains again is slow. A run that
is SIGKILLed runs in a process of its own; the resume that follows (and the run without
`[eval]`) runs the same command in the test's process, which is what it compares, not the
process, and saves a new interpreter's imports each time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_run import retrain as retrain_here

from retrain.io.log import read_jsonl
from retrain.training.telemetry import WALL_CLOCK_FIELDS

REWARD = '''
def score(response, reference):
    """A toy verifiable reward with variance on an untrained model: digits in the answer."""
    return float(sum(ch.isdigit() for ch in response) >= 2)
'''


EVAL = {"every": 1, "k": 8, "before_train": True}


def write_run(root: Path, evaluation: dict[str, object] | None = EVAL, **training: object) -> Path:
    (root / "toy_reward.py").write_text(REWARD)
    settings = {"seed": 0, "max_steps": 6, "batch_size": 4, "group_size": 4, "max_tokens": 8,
                "temperature": 1.0, "top_p": 1.0, "lr": 1e-2, "sft_warmup_steps": 3, "sft_lr": 3e-3,
                "sft_loss_fn": "cross_entropy", "save_every": 2, **training}
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in settings.items())
    eval_lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in (evaluation or {}).items())
    eval_section = f"[eval]\n{eval_lines}" if evaluation else ""
    cfg = root / "run.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
lora_rank = 4
[backend]
devices = "cpu"
adapter_path = "{root / 'adapters'}"
[algorithm]
advantage_mode = "maxrl"
transform_mode = "gtpo_sepa"
[sepa]
delay_steps = 1
steps = 4
correct_rate_gate = 0.0
[training]
{lines}
[data]
source = "arithmetic"
[reward]
type = "custom"
custom_module = "toy_reward"
custom_function = "score"
{eval_section}
[logging]
log_dir = "{root / 'logs'}"
""")
    return cfg


def retrain(cfg: Path, *args: str, crash: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RETRAIN_CRASH_AT": crash}
    return subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg), *args], cwd=cfg.parent, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def deterministic(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_FIELDS} for r in rows]


TRAINING = ("metrics", "steps", "generations", "adapter")


def outputs(root: Path) -> dict[str, object]:
    logs = root / "logs"
    return {
        "metrics": deterministic(read_jsonl(logs / "metrics.jsonl")),
        "steps": deterministic(read_jsonl(logs / "emergence" / "steps.jsonl")),
        "generations": read_jsonl(logs / "emergence" / "generations.jsonl"),
        "adapter": (root / "adapters" / "final" / "adapter_model.safetensors").read_bytes(),
        "eval": deterministic(read_jsonl(logs / "eval.jsonl")),
        "eval_problems": {p.name: p.read_text() for p in sorted((logs / "eval").glob("*"))},
    }


@pytest.fixture(scope="session")
def reference(build_once) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """The uninterrupted run, built once per session: what the crash matrix resumes to."""

    def train(root: Path) -> None:
        res = retrain(write_run(root))
        (root / "stdout.log").write_text(res.stdout)
        assert res.returncode == 0, res.stderr

    root = build_once("training-run-uninterrupted", train)
    return {"root": root, "stdout": (root / "stdout.log").read_text(), **outputs(root)}


def test_run_writes_the_run_directory(reference: dict[str, object]) -> None:
    root = Path(str(reference["root"]))
    logs = root / "logs"
    rows = read_jsonl(logs / "metrics.jsonl")
    assert [r["step"] for r in rows if r.get("phase") == "sft"] == [0, 1, 2]
    rl = [r for r in rows if r.get("phase") != "sft"]
    assert [r["step"] for r in rl] == list(range(6))
    for key in ("loss", "mean_reward", "correct_rate", "condition", "num_datums", "step_time_s",
                "tokens_per_second", "sepa_lambda", "process_max_rss_mb"):
        assert key in rl[0], key
    assert rl[0]["condition"] == "maxrl+gtpo_sepa"
    assert any(r["num_datums"] > 0 for r in rl), "no step trained"
    state = json.loads((logs / "trainer_state.json").read_text())
    assert state["checkpoint_name"] == "final" and state["step"] == 5
    meta = json.loads((logs / "run_meta.json").read_text())
    assert meta["status"] == "succeeded" and meta["config"]["lr"] == 1e-2
    assert meta["versions"]["retrain-core"]
    assert not (logs / "run.pid").exists()
    assert (root / "adapters" / "checkpoint_step_2" / "optimizer.pt").exists()
    assert (logs / "latest_sampler_path.txt").read_text() == f"{root / 'adapters' / 'final'}\n"
    assert "Training complete" in str(reference["stdout"])


def test_run_evaluates_held_out_problems(reference: dict[str, object]) -> None:
    logs = Path(str(reference["root"])) / "logs"
    rows = read_jsonl(logs / "eval.jsonl")
    assert [r["step"] for r in rows] == list(range(7))  # before RL, then after each of 6 steps
    for r in rows:
        assert 0 <= r["eval/pass@1"] <= r["eval/pass@8"] <= 1, r
        assert r["eval/k"] == 8 and r["eval/examples"] > 0
    assert any(0 < r["eval/pass@1"] < 1 for r in rows), "the toy reward should separate samples"
    problems = read_jsonl(logs / "eval" / "step_6.jsonl")
    assert len(problems) == rows[-1]["eval/examples"] and all(len(p["rewards"]) == 8 for p in problems)
    train = {r["prompt"] for r in read_jsonl(logs / "emergence" / "generations.jsonl")}
    assert train.isdisjoint(p["prompt"] for p in problems)
    assert "held-out" in str(reference["stdout"]) and "evaluation time" in str(reference["stdout"])


@pytest.mark.slow
def test_evaluation_does_not_change_training(reference: dict[str, object], tmp_path: Path) -> None:
    """The same run without [eval]: every training row and the final adapter are identical."""
    res = retrain_here(write_run(tmp_path, evaluation=None))
    assert res.returncode == 0, res.stderr
    got = outputs(tmp_path)
    assert not got["eval"] and not (tmp_path / "logs" / "eval.jsonl").exists()
    for key in TRAINING:
        assert got[key] == reference[key], key


def test_sepa_schedule_counts_warmup_steps(reference: dict[str, object]) -> None:
    """spec algorithms.md §8: lambda_lin(step) uses the global step, SFT warmup included.
    delay 1, steps 4, 3 warmup steps, gate open: RL step s has global step 3 + s, so
    lambda = min((3 + s - 1) / 4, 1)."""
    rows = [r for r in read_jsonl(Path(str(reference["root"])) / "logs" / "metrics.jsonl") if r.get("phase") != "sft"]
    assert [r["sepa_lambda"] for r in rows] == [0.5, 0.75, 1.0, 1.0, 1.0, 1.0]


def test_every_checkpoint_loads_with_peft(reference: dict[str, object]) -> None:
    """Checkpoints keep the reference layout: the adapter files at the top level, so user
    scripts load `checkpoint_step_N/` (and `final/`) with PeftModel.from_pretrained."""
    from peft import PeftModel
    from safetensors.torch import load_file

    from retrain.models.load import ModelSpec, load_model

    root = Path(str(reference["root"]))
    folders = [*sorted((root / "adapters").glob("checkpoint_step_*")), root / "adapters" / "final"]
    assert [f.name for f in folders] == ["checkpoint_step_2", "checkpoint_step_4", "checkpoint_step_6", "final"]
    for folder in folders:
        base = load_model(ModelSpec("tiny"), seed=0)
        model = PeftModel.from_pretrained(base, str(folder))
        saved = load_file(str(folder / "adapter_model.safetensors"))
        loaded = {k: v for k, v in model.state_dict().items() if "lora_" in k}
        assert len(saved) == len(loaded) > 0, folder
        assert all(any(v.equal(w) for w in loaded.values()) for v in saved.values()), folder


def test_rerun_refuses_to_overwrite(reference: dict[str, object]) -> None:
    root = Path(str(reference["root"]))
    res = retrain(root / "run.toml")
    assert res.returncode == 2 and "already holds a run" in res.stderr
    res = retrain(root / "run.toml", "--resume", str(root / "logs"))
    assert res.returncode == 2 and "already finished" in res.stderr
    check = subprocess.run([sys.executable, "-m", "retrain.cli", "resume-check", str(root / "logs")],
                           capture_output=True, text=True, timeout=120, check=False)
    assert check.returncode == 1 and "run_finished" in check.stdout


@pytest.mark.slow
@pytest.mark.parametrize("crash", [
    "after_step@0",             # before any checkpoint: resume starts over
    "warmup_after_checkpoint@1",  # during the SFT warmup
    "after_checkpoint@3",       # just after a checkpoint
    "mid_checkpoint@3",         # checkpoint directory written, state not yet
    "mid_metrics@4",            # half a metrics row on disk
    "mid_eval@0",               # half of the evaluation before RL on disk (resumes the warmup)
    "mid_eval@3",               # half of an evaluation's row on disk, its problems file written
])
def test_sigkill_then_resume_is_bit_identical(reference: dict[str, object], tmp_path: Path, crash: str) -> None:
    cfg = write_run(tmp_path)
    killed = retrain(cfg, crash=crash)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    check = subprocess.run([sys.executable, "-m", "retrain.cli", "resume-check", str(tmp_path / "logs"), "--json"],
                           capture_output=True, text=True, timeout=120, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads(check.stdout)["ok"] is True
    resumed = retrain_here(cfg, "--resume", str(tmp_path / "logs"))
    assert resumed.returncode == 0, resumed.stderr
    got = outputs(tmp_path)
    for key in ("metrics", "steps", "generations", "eval", "eval_problems"):
        assert got[key] == reference[key], key
    assert got["adapter"] == reference["adapter"]
    # the end-of-run summary covers the whole run, not only the steps after the resume
    summary = [line for line in str(reference["stdout"]).splitlines() if "mean reward" in line]
    assert summary and summary == [line for line in resumed.stdout.splitlines() if "mean reward" in line]


@pytest.mark.slow
def test_wandb_offline_logging(tmp_path: Path) -> None:
    cfg = write_run(tmp_path, max_steps=2, sft_warmup_steps=1, save_every=0)
    cfg.write_text(cfg.read_text() + 'wandb_project = "retrain-test"\nwandb_tags = "a,b"\n')
    env_crash = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    res = subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg)], cwd=tmp_path,
                         env={**os.environ, **env_crash, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                         timeout=600, check=False)
    assert res.returncode == 0, res.stderr
    runs = list((tmp_path / "logs" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    data = b"".join(p.read_bytes() for p in runs[0].glob("*.wandb"))
    assert b"train/mean_reward" in data and b"train/loss" in data
    assert b"eval/pass@1" in data and b"eval/pass@8" in data
