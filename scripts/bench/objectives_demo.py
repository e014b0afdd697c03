"""The demo (repo-root retrain.toml) under each objective beside the plain demo, seed by
seed, as one JSON object and a markdown table.

    uv run python scripts/bench/objectives_demo.py
    BENCH_SEEDS=1,2,3 BENCH_CONDITIONS=baseline,dynamic uv run python scripts/bench/objectives_demo.py

Environment: BENCH_SEEDS (default "1,2,3"), BENCH_CONDITIONS (default: all below), BENCH_OUT
(folder of the runs, default a temporary one; a run whose metrics are complete there, made by
the same committed code (git trees of packages/ and retrain.toml, in its code.txt), is read,
not run again; one made by other code stops the benchmark), BENCH_THREADS (OMP_NUM_THREADS of each run, default 1).

Conditions: `baseline` the demo as it is (MaxRL advantages, plain policy gradient, token
ratios); `gspo` sequence ratios clipped per completion at TRL's GSPO band (3e-4, 4e-4);
`cispo` with TRL's cap of 5 (`clip_eps_high = 4`); `sapo` with TRL's temperatures; `is_seq`
the sampler-mismatch correction at sequence level, masking (TRL's default mode, cap 3);
`dynamic` DAPO dynamic sampling; `overlong` with `--overlong-buffer 1` (the demo's answers need
up to 11 of its 12 tokens, so a longer buffer would penalise right answers: only a completion
that runs to 12 tokens, cut or not, gets the penalty, -1); `mask` truncated completions out of
the loss. Runs go one at a time, seed by seed, each seed's conditions in turn, so a change in
the machine's load hits every condition alike.

Per run: the mean reward of the last 10 RL steps (`last10`), the held-out pass@1 after the
last step, the RL wall time (the steps' `step_time_s`, evaluation excluded), and against the
same seed's baseline: the first RL step at which the mean reward of the 10 steps ending there
reaches the baseline's `last10` (`steps_to_baseline`, counted in steps done; null if never)
and the RL wall time to that step.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CONDITIONS: dict[str, list[str]] = {
    "baseline": [],
    "gspo": ["--importance-sampling-level", "sequence", "--clip-eps", "3e-4", "--clip-eps-high", "4e-4"],
    "cispo": ["--policy-loss-mode", "cispo", "--clip-eps-high", "4.0"],
    "sapo": ["--policy-loss-mode", "sapo"],
    "is_seq": ["--importance-sampling-correction", "true", "--importance-sampling-mode", "sequence_mask",
               "--importance-sampling-cap", "3.0"],
    "dynamic": ["--dynamic-sampling", "true"],
    "overlong": ["--overlong-buffer", "1"],
    "mask": ["--mask-truncated-completions", "true"],
}
WINDOW = 10


def rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def code_stamp() -> str:
    """The git tree of packages/ and the demo's file: what a run's figures depend on. A
    working tree with changes there has no stamp a later run could match."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()

    if git("status", "--porcelain", "--", "packages", "retrain.toml"):
        return f"uncommitted changes on {git('rev-parse', '--short', 'HEAD')}"
    return f"{git('rev-parse', 'HEAD:packages')} {git('rev-parse', 'HEAD:retrain.toml')}"


def train(out: Path, condition: str, seed: int) -> Path:
    logs = out / f"{condition}-s{seed}" / "logs"
    stamp_file = logs.parent / "code.txt"
    stamp = code_stamp()
    metrics = [r for r in rows(logs / "metrics.jsonl") if r.get("phase") != "sft"]
    if len(metrics) == 400 and len(rows(logs / "eval.jsonl")) == 2:
        made_by = stamp_file.read_text().strip() if stamp_file.is_file() else "unknown code"
        if made_by == stamp and not stamp.startswith("uncommitted"):
            return logs
        raise SystemExit(f"{logs.parent} holds a run of other code ({made_by}; now {stamp}): delete it")
    if logs.parent.exists():
        raise SystemExit(f"{logs.parent} holds an unfinished run: delete it")
    logs.parent.mkdir(parents=True)
    stamp_file.write_text(stamp + "\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env["OMP_NUM_THREADS"] = os.environ.get("BENCH_THREADS", "1")
    cmd = [sys.executable, "-m", "retrain.cli", str(REPO / "retrain.toml"), "--seed", str(seed), "--log-dir",
           str(logs), "--adapter-path", str(logs.parent / "adapters"), *CONDITIONS[condition]]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    (logs.parent / "stdout.log").write_text(done.stdout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return logs


def measure(logs: Path) -> dict[str, Any]:
    rl = [r for r in rows(logs / "metrics.jsonl") if r.get("phase") != "sft"]
    evals = rows(logs / "eval.jsonl")
    rewards = [float(r["mean_reward"]) for r in rl]
    out: dict[str, Any] = {
        "last10": statistics.fmean(rewards[-WINDOW:]),
        "pass@1_before": float(evals[0]["eval/pass@1"]), "pass@1_after": float(evals[-1]["eval/pass@1"]),
        "rl_wall_s": sum(float(r["step_time_s"]) for r in rl),
        "rewards": rewards, "times": [float(r["step_time_s"]) for r in rl],
    }
    if "dynamic/groups_sampled" in rl[0]:
        out["dropped_share"] = sum(r["dynamic/groups_dropped"] for r in rl) / sum(r["dynamic/groups_sampled"] for r in rl)
        out["extra_rounds"] = int(sum(r["dynamic/extra_rounds"] for r in rl))
        out["short_steps"] = sum(r["dynamic/batch_fill"] < 1 for r in rl)
    if "overlong/penalty_mean" in rl[0]:
        out["penalized_share"] = statistics.fmean(r["overlong/penalized_share"] for r in rl)
    return out


def reach(run: dict[str, Any], target: float) -> tuple[int | None, float | None]:
    """The steps done and RL wall time when the trailing 10-step mean reward first reaches
    `target`."""
    rewards, times = run["rewards"], run["times"]
    for end in range(WINDOW, len(rewards) + 1):
        if statistics.fmean(rewards[end - WINDOW:end]) >= target:
            return end, sum(times[:end])
    return None, None


def spread(runs: list[dict[str, Any]], key: str, fmt: str) -> str:
    values = [float(r[key]) for r in runs]
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):{fmt}} ± {sd:{fmt}}"


def main() -> None:
    seeds = [int(s) for s in os.environ.get("BENCH_SEEDS", "1,2,3").split(",")]
    conditions = os.environ.get("BENCH_CONDITIONS", ",".join(CONDITIONS)).split(",")
    if "baseline" not in conditions:
        conditions.insert(0, "baseline")
    out = Path(os.environ.get("BENCH_OUT") or tempfile.mkdtemp(prefix="dapo-demo-"))
    results: dict[str, dict[int, dict[str, Any]]] = {c: {} for c in conditions}
    for seed in seeds:
        for condition in conditions:
            results[condition][seed] = measure(train(out, condition, seed))
    report: dict[str, Any] = {"out": str(out), "seeds": seeds, "runs": {}}
    for condition in conditions:
        for seed in seeds:
            run = results[condition][seed]
            steps, wall = reach(run, results["baseline"][seed]["last10"])
            report["runs"][f"{condition}-s{seed}"] = {
                **{k: v for k, v in run.items() if k not in ("rewards", "times")},
                "steps_to_baseline": steps, "wall_s_to_baseline": wall}
    print(json.dumps(report, indent=1))
    print("| condition | last-10 reward | held-out pass@1 | RL s | steps to baseline's last-10 | s to it |")
    print("|---|---|---|---|---|---|")
    for condition in conditions:
        runs = [report["runs"][f"{condition}-s{seed}"] for seed in seeds]
        steps = " / ".join("-" if r["steps_to_baseline"] is None else str(r["steps_to_baseline"]) for r in runs)
        wall = " / ".join("-" if r["wall_s_to_baseline"] is None else f"{r['wall_s_to_baseline']:.0f}" for r in runs)
        print(f"| {condition} | {spread(runs, 'last10', '.3f')} | {spread(runs, 'pass@1_after', '.3f')} | "
              f"{spread(runs, 'rl_wall_s', '.0f')} | {steps} | {wall} |")


if __name__ == "__main__":
    main()
