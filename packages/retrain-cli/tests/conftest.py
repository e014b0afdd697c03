"""Shared helpers for CLI tests: run the real `retrain` app in-process or as a subprocess, and
generated log trees: runs (metrics.jsonl, trainer_state.json, run_meta.json, run.pid) and
campaigns (manifest.json + runs/<label>_s<seed>/), shaped like the trainer's run directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[3]


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    """cli(*args, cwd=tmp_path) -> Result, in-process through typer's runner."""
    from retrain.cli import app

    def run(*args: str, cwd: Path | None = None, input: str | None = None) -> Result:
        monkeypatch.chdir(cwd or tmp_path)
        res = CliRunner().invoke(app, list(args), input=input, prog_name="retrain")
        if res.exception and not isinstance(res.exception, SystemExit):
            raise res.exception
        return Result(res.exit_code, res.stdout, res.stderr)

    return run


def run_subprocess(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Result:
    """The console entry point in a real process, as a user runs it."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "retrain.cli", *args], cwd=cwd, capture_output=True,
                          text=True, env=full_env, timeout=120, check=False)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli_process():  # type: ignore[no-untyped-def]
    return run_subprocess


@pytest.fixture
def repo() -> Path:
    return REPO


def metric_row(step: int, condition: str = "maxrl+gtpo_sepa", **extra):
    row = {
        "step": step,
        "condition": condition,
        "mean_reward": round(0.1 + 0.01 * step, 4),
        "correct_rate": round(min(1.0, 0.05 + 0.02 * step), 4),
        "loss": round(1.0 / (step + 1), 4),
        "step_time_s": 2.0,
        "sample_time_s": 1.5,
        "train_time_s": 0.5,
        "tokens_per_second": 1000.0 + step,
        "sample_share": 0.75,
        "train_share": 0.25,
        "train_time_semantics": "synchronous_optimizer_update",
        "process_max_rss_mb": 512.0 + step,
    }
    row.update(extra)
    return row


def eval_row(step: int, pass1: float, k: int = 4, **extra):
    """An eval.jsonl row, as `retrain.evaluation.row.EvalRow.to_dict` writes it."""
    row = {"step": step, "eval/k": k, "eval/examples": 20, "eval/mean_reward": pass1, "eval/pass@1": pass1,
           f"eval/pass@{k}": min(1.0, 2 * pass1), "eval/mean_tokens": 9.0, "eval/truncated_share": 0.0,
           "eval/wall_s": 0.5}
    row.update(extra)
    return row


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_run(
    path: Path,
    steps: int = 5,
    *,
    condition: str = "maxrl+gtpo_sepa",
    final: bool = False,
    pid: int | None = None,
    meta: dict | None = None,
    tail: bytes = b"",
    age_s: float = 0.0,
    rows: list[dict] | None = None,
    metrics: bool = True,
    evals: list[dict] | None = None,
) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if metrics:
        rows = rows if rows is not None else [metric_row(i, condition) for i in range(steps)]
        with open(path / "metrics.jsonl", "wb") as f:
            for row in rows:
                f.write(json.dumps(row).encode() + b"\n")
            f.write(tail)
    if evals is not None:
        (path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    last = (rows or [{}])[-1].get("step", steps - 1) if rows else steps - 1
    if final:
        (path / "trainer_state.json").write_text(json.dumps(
            {"step": last, "checkpoint_name": "final", "resume_mode": "adapter_only"}))
    if meta is not None:
        (path / "run_meta.json").write_text(json.dumps(meta))
    if pid is not None:
        (path / "run.pid").write_text(f"{pid}\n")
    if age_s:
        stamp = time.time() - age_s
        for child in path.iterdir():
            os.utime(child, (stamp, stamp))
    return path


def write_campaign(
    root: Path,
    name: str,
    conditions: list[str],
    seeds: list[int],
    *,
    max_steps: int = 10,
    runner_pid: int | None = None,
    runs: dict | None = None,
    returncodes: dict | None = None,
) -> Path:
    """`runs` maps (condition, seed) to write_run keyword arguments; missing cells stay
    unstarted (listed in the manifest, no folder)."""
    campaign = root / name
    campaign.mkdir(parents=True)
    entries = []
    for cond in conditions:
        for seed in seeds:
            run_name = f"{cond}_s{seed}"
            log_dir = f"logs/{name}/runs/{run_name}"
            entry = {"condition": cond, "seed": seed, "run_name": run_name, "log_dir": log_dir}
            if returncodes and (cond, seed) in returncodes:
                entry["returncode"] = returncodes[(cond, seed)]
            entries.append(entry)
            kwargs = (runs or {}).get((cond, seed))
            if kwargs is not None:
                write_run(campaign / "runs" / run_name, condition=cond, **kwargs)
    manifest = {"timestamp": name.removeprefix("campaign_"), "campaign_toml": "campaign.toml",
                "conditions": conditions, "seeds": seeds, "max_steps": max_steps, "parallel": True,
                "num_runs": len(entries), "runs": entries}
    if runner_pid is not None:
        manifest["runner_pid"] = runner_pid
    (campaign / "manifest.json").write_text(json.dumps(manifest))
    return campaign


@pytest.fixture
def make_run():
    return write_run


@pytest.fixture
def make_campaign():
    return write_campaign


@pytest.fixture
def row():
    return metric_row


@pytest.fixture
def evaluation():
    return eval_row


@pytest.fixture
def gone_pid():
    return dead_pid()


@pytest.fixture
def log_tree(tmp_path):
    """A mixed root: a running, a finished, a dead-pid, a stale, an empty and a torn run, and a
    running campaign (2 conditions x 2 seeds: finished, running, failed, unstarted)."""
    root = tmp_path / "logs"
    write_run(root / "live", 7, pid=os.getpid(), meta={"trainer": "retrain", "status": "running"})
    write_run(root / "done", 4, final=True, meta={"trainer": "retrain", "status": "succeeded"},
              evals=[eval_row(0, 0.2), eval_row(4, 0.6)])
    write_run(root / "crashed", 3, pid=dead_pid())
    write_run(root / "sleepy", 2, age_s=3600)
    write_run(root / "empty", rows=[])
    write_run(root / "nested" / "torn", 3, tail=b'{"step": 3, "loss": 0.')
    write_campaign(
        root, "campaign_20260101_000000", ["grpo+none", "maxrl+gtpo"], [42, 101],
        runner_pid=os.getpid(), max_steps=10,
        runs={("grpo+none", 42): {"steps": 10, "final": True},
              ("grpo+none", 101): {"steps": 6, "pid": os.getpid()},
              ("maxrl+gtpo", 42): {"steps": 2, "meta": {"status": "failed", "failure_status": "exception:OOM"}}},
    )
    return root


@pytest.fixture
def fake_backend(install_distribution):  # type: ignore[no-untyped-def]
    """fake_backend(contract, available=True, note="") installs `retrain-backends-foo` 0.3.0, a
    third-party distribution registering the backend `foo` (its factory is never reached)."""

    def install(contract: object, available: bool = True, note: str = "") -> None:
        install_distribution(
            "retrain-backends-foo", "0.3.0", {"retrain.backends": {"foo": "foo_backend.definition:BACKEND"}},
            {"foo_backend/definition.py": (
                "from retrain.backends.catalog import BackendCapabilities, BackendDefinition\n"
                "BACKEND = BackendDefinition(name='foo', factory='foo_backend.create:make',\n"
                f"    distribution='retrain-backends-foo', contract={contract!r}, available={available!r},\n"
                f"    note={note!r}, capabilities=BackendCapabilities(preserves_token_advantages=True))\n")})

    return install
