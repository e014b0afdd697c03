"""retrain against TRL's GRPOTrainer on one task (scripts/peer/): reward per step, s/step and
reward at equal wall-clock, as one JSON object.

    uv run python scripts/bench/trl_learning.py
    BENCH_STEPS=24 BENCH_SEEDS=3 BENCH_PROFILES=medium uv run python scripts/bench/trl_learning.py

Environment: BENCH_STEPS (default 6), BENCH_SEEDS (default 1: seeds s..s+n-1 from
BENCH_FIRST_SEED, default 0), BENCH_PROFILES
(default "small,medium"), BENCH_TOP_K (TRL's top_k, default 0 = off, as retrain samples),
BENCH_THREADS (torch threads of each run, default 1), BENCH_RETRAIN_SET (";"-separated
`section.key=value` changes for retrain, for ablations).

Both trainers start from one saved model per profile (assets.build_model, init seed 0). For
each profile and seed TRL trains BENCH_STEPS steps, then retrain trains at least as many steps
and for as long as TRL took (its budget), one run at a time, alternating trainers, so a change
in the machine's load hits both alike. `last_window` is the mean reward of the last quarter of
the steps; `equal_wall_clock` compares, at the time TRL needed for all its steps, the mean
reward of each trainer's last quarter-of-the-steps window finished by then. Without a TRL
environment (no package index) it prints `{"skipped": reason}` and exits 0.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PEER = Path(__file__).resolve().parents[1] / "peer"
sys.path.insert(0, str(PEER))

import assets  # noqa: E402
import trl_env  # noqa: E402


def run(cmd: list[str], threads: int) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def window_mean(rewards: list[float], end: int, width: int) -> float:
    """Mean reward of the `width` steps ending with step `end` (exclusive)."""
    chunk = rewards[max(0, end - width):end]
    return sum(chunk) / len(chunk)


def steps_done_by(step_times: list[float], seconds: float) -> int:
    elapsed, done = 0.0, 0
    for dt in step_times:
        elapsed += dt
        if elapsed > seconds:
            break
        done += 1
    return done


def summarise(trl: list[dict[str, Any]], ours: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    width = max(1, steps // 4)

    def per_step(runs: list[dict[str, Any]]) -> list[float]:
        return [round(statistics.fmean(r["rewards"][i] for r in runs), 4) for i in range(steps)]

    def s_per_step(runs: list[dict[str, Any]]) -> float:
        return round(statistics.fmean(sum(r["step_times"][:steps]) / steps for r in runs), 3)

    at_equal = []
    for t, o in zip(trl, ours, strict=True):
        budget = sum(t["step_times"][:steps])
        reached = steps_done_by(o["step_times"], budget)
        at_equal.append({"seed": t["seed"], "seconds": round(budget, 2), "trl_steps": steps, "retrain_steps": reached,
                         "trl": round(window_mean(t["rewards"], steps, width), 4),
                         "retrain": round(window_mean(o["rewards"], reached, width), 4) if reached else None})
    done = [e for e in at_equal if e["retrain"] is not None]
    return {
        "reward_per_step": {"trl": per_step(trl), "retrain": per_step(ours)},
        "s_per_step": {"trl": s_per_step(trl), "retrain": s_per_step(ours)},
        "last_window": {"steps": [steps - width, steps - 1],
                        "trl": round(statistics.fmean(window_mean(r["rewards"], steps, width) for r in trl), 4),
                        "retrain": round(statistics.fmean(window_mean(r["rewards"], steps, width) for r in ours), 4)},
        "equal_wall_clock": {
            "window": width, "per_seed": at_equal,
            "trl": round(statistics.fmean(e["trl"] for e in done), 4) if done else None,
            "retrain": round(statistics.fmean(e["retrain"] for e in done), 4) if done else None,
        },
    }


def main() -> None:
    steps = int(os.environ.get("BENCH_STEPS", "6"))
    first = int(os.environ.get("BENCH_FIRST_SEED", "0"))
    seeds = range(first, first + int(os.environ.get("BENCH_SEEDS", "1")))
    profiles = [p.strip() for p in os.environ.get("BENCH_PROFILES", "small,medium").split(",") if p.strip()]
    top_k = int(os.environ.get("BENCH_TOP_K", "0"))
    threads = int(os.environ.get("BENCH_THREADS", "1"))
    changes = [c.strip() for c in os.environ.get("BENCH_RETRAIN_SET", "").split(";") if c.strip()]
    try:
        python = trl_env.ensure()
    except trl_env.PeerUnavailable as exc:
        print(json.dumps({"skipped": f"no TRL environment: {exc}"}))
        return
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="bench-trl-"))
    out: dict[str, Any] = {"steps": steps, "seeds": list(seeds), "top_k": top_k, "torch_threads": threads,
                           "retrain_changes": changes, "order": "per seed: TRL then retrain, alternating",
                           "load_average_start": os.getloadavg(), "versions": trl_env.pins(), "profiles": {}}
    for profile in profiles:
        model = assets.build_model(root / profile, profile)
        trl_runs, ours = [], []
        for seed in seeds:
            common = ["--model", str(model), "--profile", profile, "--seed", str(seed), "--steps", str(steps)]
            print(f"== {profile} seed {seed}: trl", file=sys.stderr, flush=True)
            trl_runs.append(run([str(python), str(PEER / "trl_train.py"), *common, "--top-k", str(top_k)], threads))
            budget = sum(trl_runs[-1]["step_times"][:steps])
            print(f"== {profile} seed {seed}: retrain ({budget:.0f}s budget)", file=sys.stderr, flush=True)
            sets = [a for c in changes for a in ("--set", c)]
            ours.append(run([sys.executable, str(PEER / "retrain_train.py"), *common, "--budget-s", str(budget),
                             *sets], threads))
        out["profiles"][profile] = {**summarise(trl_runs, ours, steps),
                                    "runs": {"trl": trl_runs, "retrain": ours}}
    out["load_average_end"] = os.getloadavg()
    out["bench_wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
