"""Held-out evaluation on the tiny model: problems/s at k = 1 and k = 8, and the share of a demo
run's wall time spent evaluating (JSON).

Throughput: the demo config (retrain.toml: `tiny`, every weight trained, 12 new tokens) with
its random initial weights, on the first 256 held-out sums of difficulty 2, through the same
`evaluate` the trainer calls; one untimed warm-up evaluation, then the median of three. A
random-weights model rarely emits EOS, so nearly every completion runs to 12 tokens: the
worst case for time per problem.

Demo share: runs `retrain retrain.toml` in a temporary folder (about three minutes) and
divides the sum of `eval/wall_s` in its eval.jsonl by the process's wall time; `--demo-log
DIR` reads a finished demo run instead (its wall time is then the sum of step and
evaluation times plus the warmup rows', without process start-up).

    uv run python scripts/bench/evaluation.py
    uv run python scripts/bench/evaluation.py --demo-log logs/demo
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBLEMS = 256


def throughput() -> list[dict[str, object]]:
    import torch

    from retrain.backends.local.backend import LocalBackend
    from retrain.evaluation.evaluate import encode_problems, evaluate
    from retrain.evaluation.problems import load_problems
    from retrain.evaluation.settings import EvalPlan
    from retrain.rewards.create import build_reward
    from retrain.validation.load import load_config

    config = load_config(REPO / "retrain.toml", ["--data-difficulty", "2"]).config
    backend = LocalBackend(config)
    reward = build_reward(config)
    problems = encode_problems(load_problems(config, max_examples=PROBLEMS), backend.tokenizer)
    out = []
    for k in (1, 8):
        plan = EvalPlan.of(config, k=k)

        def once(plan: EvalPlan = plan, k: int = k) -> tuple[float, float]:
            t0 = time.perf_counter()
            row = evaluate(backend, problems, reward, k, params=plan.params, per_call=plan.per_call).row
            return time.perf_counter() - t0, row.mean_tokens

        once()
        runs = [once() for _ in range(3)]
        seconds = statistics.median(s for s, _ in runs)
        out.append({"k": k, "problems": len(problems), "problems_per_call": plan.per_call,
                    "temperature": plan.params.temperature, "mean_tokens": round(runs[0][1], 2),
                    "seconds": round(seconds, 3), "problems_per_s": round(len(problems) / seconds, 1),
                    "samples_per_s": round(k * len(problems) / seconds, 1)})
    out.append({"threads": torch.get_num_threads()})
    return out


def demo_share(log_dir: str | None) -> dict[str, object]:
    from retrain.io.log import read_jsonl

    if log_dir is None:
        folder = Path(tempfile.mkdtemp(prefix="retrain-demo-"))
        try:
            shutil.copy(REPO / "retrain.toml", folder / "retrain.toml")
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "retrain.cli"], cwd=folder, check=True, capture_output=True,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"})
            wall = time.perf_counter() - t0
            evals = read_jsonl(folder / "logs" / "demo" / "eval.jsonl")
            source = "a fresh demo run (process wall time)"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    else:
        evals = read_jsonl(Path(log_dir) / "eval.jsonl")
        rows = read_jsonl(Path(log_dir) / "metrics.jsonl")
        wall = sum(float(r.get("step_time_s", 0.0)) for r in rows) + sum(float(r["eval/wall_s"]) for r in evals)
        source = f"{log_dir} (step and evaluation times)"
    eval_s = sum(float(r["eval/wall_s"]) for r in evals)
    return {"source": source, "evaluations": len(evals), "eval_s": round(eval_s, 3), "wall_s": round(wall, 1),
            "eval_share": round(eval_s / wall, 5) if wall else None,
            "pass@1": [(r["step"], r["eval/pass@1"]) for r in evals]}


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    log_dir = sys.argv[sys.argv.index("--demo-log") + 1] if "--demo-log" in sys.argv else None
    print(json.dumps({"benchmark": "evaluation", "model": "tiny", "cpus": os.cpu_count(),
                      "throughput": throughput(), "demo": demo_share(log_dir)}))


if __name__ == "__main__":
    main()
