"""What the local backend's memory options buy on an SFT run with a long tail of row lengths:
peak resident memory of the whole `retrain` process, training time, trainable parameters and
the forwards per step, as one JSON object (medians over BENCH_RUNS runs of each setting).

    uv run python scripts/bench/local_memory_options.py

Environment: BENCH_STEPS (default 8), BENCH_BATCH (16), BENCH_RUNS (3), BENCH_BUDGET (the
token budget, default 512), BENCH_DEVICE (default cpu), BENCH_PROFILE (scripts/peer/assets.py,
default "medium").

Every batch holds one long row (240 tokens) and short ones (about 8): padded to the longest,
the whole batch is 16 x 240 positions; `train_sft_microbatch_token_budget` runs the long row
alone and the short ones together. `lora_freeze_a` trains B alone (LoRA-FA). The settings run
in turn (whole, budget, freeze_a, whole, ...) so a change in the machine's load hits all alike.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peer"))

import assets

LONG, SHORT = 230, 4  # completion characters (one token each under the peer's tokenizer)


def write_rows(path: Path, n: int, batch: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        size = LONG if i % batch == 0 else SHORT
        completion = "".join(rng.choice("0123456789") for _ in range(size))
        lines.append(json.dumps({"prompt": f"{a}+{b}=", "completion": completion}))
    path.write_text("\n".join(lines) + "\n")
    return path


def run(root: Path, model: Path, data: Path, steps: int, batch: int, device: str,
        options: dict[str, Any]) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    opts = "\n".join(f"{k} = {json.dumps(v)}" for k, v in options.items())
    cfg = root / "sft.toml"
    cfg.write_text(f"""
[model]
model = "{model}"
lora_rank = 8
[backend]
devices = "{device}"
adapter_path = "{root / 'adapters'}"
[backend.options]
{opts}
[training]
trainer = "sft"
sft_data_path = "{data}"
sft_max_tokens = 250
seed = 0
max_steps = {steps}
batch_size = {batch}
lr = 1e-3
save_every = 0
[logging]
log_dir = "{root / 'logs'}"
""")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    # a wrapper process reports its one child's peak resident memory (ru_maxrss, KiB on Linux)
    done = subprocess.run([sys.executable, "-c", PEAK, sys.executable, "-m", "retrain.cli", str(cfg)], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"retrain failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (root / "logs" / "metrics.jsonl").read_text().splitlines()]
    return {"train_s": sum(r["step_time_s"] for r in rows), "micro_batches": rows[-1].get("sft/micro_batches"),
            "trainable_parameters": rows[-1].get("local_trainable_parameters"), "loss_last": rows[-1]["loss"],
            "peak_rss_mb": round(int(done.stdout.strip().splitlines()[-1]) / 1024, 1)}


PEAK = ("import resource, subprocess, sys\n"
        "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.exit(rc)\n")


def main() -> None:
    steps = int(os.environ.get("BENCH_STEPS", "8"))
    batch = int(os.environ.get("BENCH_BATCH", "16"))
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    budget = int(os.environ.get("BENCH_BUDGET", "512"))
    device = os.environ.get("BENCH_DEVICE", "cpu")
    profile = os.environ.get("BENCH_PROFILE", "medium")
    settings = {"whole_batch": {}, "token_budget": {"train_sft_microbatch_token_budget": budget},
                "lora_freeze_a": {"lora_freeze_a": True}}
    got: dict[str, list[dict[str, Any]]] = {k: [] for k in settings}
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        root = Path(tmp)
        model = assets.build_model(root / "model", profile, init_seed=0)
        data = write_rows(root / "rows.jsonl", steps * batch, batch)
        for i in range(runs):
            for name, options in settings.items():
                got[name].append(run(root / f"{name}{i}", model, data, steps, batch, device, options))
    out: dict[str, Any] = {"profile": profile, "steps": steps, "batch": batch, "runs": runs, "budget": budget,
                           "device": device}
    for name, rs in got.items():
        out[name] = {"peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs),
                     "train_s": round(statistics.median(r["train_s"] for r in rs), 3),
                     "micro_batches_per_step": rs[-1]["micro_batches"],
                     "trainable_parameters": rs[-1]["trainable_parameters"],
                     "last_loss": round(rs[-1]["loss_last"], 4)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
