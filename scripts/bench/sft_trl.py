"""retrain's `trainer = "sft"` against TRL's SFTTrainer on the same rows and model: training
tokens per second and the loss, as one JSON object.

    uv run python scripts/bench/sft_trl.py
    BENCH_STEPS=60 BENCH_PROFILE=medium BENCH_FULL=1 uv run python scripts/bench/sft_trl.py

Environment: BENCH_STEPS (default 30), BENCH_BATCH (default 16), BENCH_ROWS (default 256),
BENCH_PROFILE (scripts/peer/assets.py, default "medium"), BENCH_FULL (1: full fine-tuning,
else LoRA r8/alpha16 on every linear layer), BENCH_THREADS (torch threads, default 1),
BENCH_DEVICE ("cpu" or "gpu:0"; default cpu).

Both start from one saved model (assets.build_model, init seed 0) and train on one generated
JSONL of two-digit additions (`{"prompt": "a+b=", "completion": "<sum>"}`) with the same
optimizer settings (lr 1e-3 constant, AdamW 0.9/0.999/1e-8, no clipping, no weight decay).
tokens/s is the non-padding tokens of all batches over the summed step times (from the first
step's start to the last step's end; model loading and tokenization excluded on both sides).
The runs alternate (TRL, retrain), so a change in the machine's load hits both alike. Without
a TRL environment (no package index) it prints `{"skipped": reason}` and exits 0.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PEER = Path(__file__).resolve().parents[1] / "peer"
sys.path.insert(0, str(PEER))

import assets  # noqa: E402
import trl_env  # noqa: E402


def write_rows(path: Path, n: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        lines.append(json.dumps({"prompt": f"{a}+{b}=", "completion": str(a + b)}))
    path.write_text("\n".join(lines) + "\n")
    return path


def env(threads: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false"}


def run_trl(python: Path, model: Path, data: Path, steps: int, batch: int, full: bool, device: str,
            threads: int) -> dict[str, Any]:
    cmd = [str(python), str(PEER / "trl_sft.py"), "--model", str(model), "--data", str(data), "--steps", str(steps),
           "--batch", str(batch), *(["--full"] if full else []), *(["--cpu"] if device == "cpu" else [])]
    if device.startswith("gpu:"):
        os.environ["CUDA_VISIBLE_DEVICES"] = device[4:]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env(threads), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"TRL failed:\n{done.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    out["tokens_per_second"] = out["tokens"] / sum(out["step_times"])
    return out


def run_retrain(root: Path, model: Path, data: Path, steps: int, batch: int, full: bool, device: str,
                threads: int) -> dict[str, Any]:
    options = "train_full_model = true\n" if full else ""  # LoRA: every projection, as TRL's all-linear
    root.mkdir(parents=True, exist_ok=True)
    cfg = root / "sft.toml"
    cfg.write_text(f"""
[model]
model = "{model}"
lora_rank = 8
[lora]
alpha = 16
dropout = 0.0
[backend]
devices = "{device}"
adapter_path = "{root / 'adapters'}"
[backend.options]
{options}
[optimizer]
beta1 = 0.9
beta2 = 0.999
eps = 1e-8
grad_clip_norm = 0.0
[training]
trainer = "sft"
sft_data_path = "{data}"
seed = 0
max_steps = {steps}
batch_size = {batch}
lr = 1e-3
weight_decay = 0.0
save_every = 0
[logging]
log_dir = "{root / 'logs'}"
""")
    done = subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg)], capture_output=True, text=True,
                          env=env(threads), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"retrain failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (root / "logs" / "metrics.jsonl").read_text().splitlines()]
    times = [r["step_time_s"] for r in rows]
    tokens = sum(r["tokens"] for r in rows)
    return {"trainer": "retrain", "steps": steps, "losses": [r["loss"] for r in rows], "step_times": times,
            "tokens": tokens, "tokens_per_second": tokens / sum(times)}


def summary(out: dict[str, Any]) -> dict[str, Any]:
    losses = out["losses"]
    k = max(1, len(losses) // 4)
    return {"tokens_per_second": round(out["tokens_per_second"], 1), "tokens": out["tokens"],
            "train_s": round(sum(out["step_times"]), 3), "first_loss": round(losses[0], 4),
            "last_quarter_loss": round(sum(losses[-k:]) / k, 4)}


def main() -> None:
    steps = int(os.environ.get("BENCH_STEPS", "30"))
    batch = int(os.environ.get("BENCH_BATCH", "16"))
    rows = int(os.environ.get("BENCH_ROWS", "256"))
    profile = os.environ.get("BENCH_PROFILE", "medium")
    full = os.environ.get("BENCH_FULL", "") == "1"
    threads = int(os.environ.get("BENCH_THREADS", "1"))
    device = os.environ.get("BENCH_DEVICE", "cpu")
    try:
        python = trl_env.ensure()
    except trl_env.PeerUnavailable as exc:
        print(json.dumps({"skipped": str(exc)}))
        return
    with tempfile.TemporaryDirectory(prefix="bench-sft-") as tmp:
        root = Path(tmp)
        model = assets.build_model(root / "model", profile, init_seed=0)
        data = write_rows(root / "rows.jsonl", rows)
        trl = run_trl(python, model, data, steps, batch, full, device, threads)
        print(json.dumps({"trl": summary(trl)}), file=sys.stderr, flush=True)
        ours = run_retrain(root / "retrain", model, data, steps, batch, full, device, threads)
    result = {"profile": profile, "steps": steps, "batch": batch, "rows": rows, "full": full, "device": device,
              "threads": threads, "trl": summary(trl), "retrain": summary(ours),
              "speedup": round(ours["tokens_per_second"] / trl["tokens_per_second"], 3)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
