"""Benchmark of the advantage pipeline: one step of 64 completions x 4,096 tokens.

Prints one JSON object. Threads are pinned to one (env vars set before numpy loads, and the
process is bound to one CPU where the OS allows), timings are the median of several runs
after a warm-up, inputs are built outside the timed region. The target is < 50 ms per step
for `gtpo_sepa`.

    uv run python scripts/bench/advantages_pipeline.py [--repeat 15] [--completions 64] [--tokens 4096]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import msgspec  # noqa: E402
import numpy as np  # noqa: E402

from retrain.advantages.episode import batch_normalize  # noqa: E402
from retrain.advantages.pipeline import GroupInput, build_pipeline  # noqa: E402
from retrain.config.schema import TrainConfig  # noqa: E402
from retrain.training.signals import apply_advantage_cap  # noqa: E402

BUDGET_MS = 50.0
CASES: dict[str, dict[str, Any]] = {
    "gtpo_sepa": {"advantage_mode": "maxrl", "transform_mode": "gtpo_sepa"},
    "none": {"advantage_mode": "grpo", "transform_mode": "none"},
    "gtpo": {"advantage_mode": "maxrl", "transform_mode": "gtpo"},
    "gtpo_hicra": {"advantage_mode": "maxrl", "transform_mode": "gtpo_hicra"},
    "gtpo_sepa_amp_c": {"advantage_mode": "grpo", "transform_mode": "gtpo_sepa_amp_c"},
    "entropy_mask": {
        "advantage_mode": "grpo",
        "transform_mode": "entropy_mask",
        "surprisal_mask_rho": 0.2,
    },
    "delight": {"advantage_mode": "grpo", "transform_mode": "delight"},
    "delight_sepa_adaptive": {
        "advantage_mode": "grpo",
        "transform_mode": "delight_sepa",
        "transform_params": {
            "delight_eta_mode": "adaptive",
            "delight_eta_target_ordering_gap": 0.2,
        },
    },
    "hard_delight": {"advantage_mode": "grpo", "transform_mode": "hard_delight"},
    "discover_entropic": {"algorithm_mode": "discover_entropic"},
}


def pin_one_cpu() -> int | None:
    try:
        cpu = sorted(os.sched_getaffinity(0))[0]
        os.sched_setaffinity(0, {cpu})
        return cpu
    except (AttributeError, OSError):
        return None


def make_groups(completions: int, tokens: int, group_size: int, seed: int) -> list[GroupInput]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(completions // group_size):
        rewards = (rng.random(group_size) < 0.4).astype(np.float64)
        logprobs = [-rng.exponential(0.8, tokens) for _ in range(group_size)]
        masks = [(rng.random(tokens) < 0.03).astype(np.int8) for _ in range(group_size)]
        out.append(GroupInput(rewards, logprobs, masks))
    return out


def time_step(case: dict[str, Any], groups: list[GroupInput], repeat: int) -> dict[str, float]:
    config = TrainConfig()
    config = msgspec.structs.replace(
        config, algorithm=msgspec.structs.replace(config.algorithm, **case)
    )
    pipeline = build_pipeline(config)

    def step() -> None:
        results, _ = pipeline.compute_groups(groups, sepa_lambda=0.5, step=100)
        rows = [row for r in results for row in r.completions()]
        if pipeline.batch_normalize:
            rows, _ = batch_normalize(rows)
        apply_advantage_cap(rows, 5.0)

    step()  # warm-up
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        step()
        runs.append((time.perf_counter() - t0) * 1000)
    return {
        "median_ms": round(statistics.median(runs), 3),
        "min_ms": round(min(runs), 3),
        "max_ms": round(max(runs), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--completions", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=4096)
    args = ap.parse_args()
    cpu = pin_one_cpu()
    shapes = {"1x64": 64, "8x8": 8}
    results: dict[str, Any] = {}
    for label, group_size in shapes.items():
        groups = make_groups(args.completions, args.tokens, group_size, seed=0)
        results[label] = {
            name: time_step(case, groups, args.repeat) for name, case in CASES.items()
        }
    headline = max(results[label]["gtpo_sepa"]["median_ms"] for label in shapes)
    print(
        json.dumps(
            {
                "benchmark": "advantages_pipeline",
                "completions": args.completions,
                "tokens_per_completion": args.tokens,
                "shapes": {
                    label: f"{args.completions // g} groups x {g} completions"
                    for label, g in shapes.items()
                },
                "repeat": args.repeat,
                "statistic": "median ms per step (advantages + batch norm when enabled + cap)",
                "gtpo_sepa_ms": headline,
                "budget_ms": BUDGET_MS,
                "within_budget": headline < BUDGET_MS,
                "modes": results,
                "threads": 1,
                # glibc returns large freed arrays to the OS, so every 2 MB temporary page-faults anew;
                # MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ raise that limit (about 2x faster here).
                "malloc_env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")},
                "pinned_cpu": cpu,
                "load_average": [round(x, 2) for x in os.getloadavg()]
                if hasattr(os, "getloadavg")
                else None,
                "numpy": np.__version__,
                "python": platform.python_version(),
                "machine": platform.machine(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
