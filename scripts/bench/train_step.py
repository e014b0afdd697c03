"""The local backend's training step alone, its layouts side by side in one process (JSON).

For each model shape, one backend per variant is built from the same seed and they take turns
on the same datums (a group's completions share its prompt; lengths vary), so a change in the
machine's load hits every variant alike. A step is `train_step`: collate, forward, backward,
AdamW. Variants: `padded` (rows padded to the widest, the path before packing), `packed`
(padding-free rows, shared prompts once: the default), `packed_full_logits` (the head at every
position instead of only where the loss reads), and on CUDA `packed_fp32_base` (the frozen
base in fp32 instead of the default bf16). Reported per variant: median s/step, the rows'
tokens per second, the tokens the layers ran over, and `mfu` on CUDA.

    uv run python scripts/bench/train_step.py                 # demo and smollm2 shapes, CPU
    uv run python scripts/bench/train_step.py --shape demo --steps 12
    python scripts/bench/train_step.py --gpu                  # the GPU kit's shape on CUDA

Shapes (random weights from the built-in tiny model's config, no download):
- demo: the README demo's model (tiny, every weight trains) and step, 16 prompts x 8
  completions of up to 12 tokens after a 6-token prompt;
- smollm2: SmolLM2-135M's shape (llama, 30 layers, hidden 576, vocabulary 49,152), LoRA r16,
  the real-model profile's step: 8 prompts x 4 completions of up to 16 tokens after 56;
- kit: the GPU kit's RL stage (Qwen3, 28 layers, hidden 1024, LoRA r32), 8 prompts x 16
  completions of up to 256 tokens after 12.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    "demo": {"model": {}, "flags": ["--backend-opt", "train_full_model=true"], "prompts": 16, "group": 8,
             "prompt_tokens": 6, "max_tokens": 12, "vocab": 103},
    "smollm2": {"model": {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
                          "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
                          "head_dim": 64, "vocab_size": 49152, "max_position_embeddings": 2048},
                "flags": ["--lora-rank", "16"], "prompts": 8, "group": 4, "prompt_tokens": 56, "max_tokens": 16,
                "vocab": 49152},
    "kit": {"model": {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
                      "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                      "max_position_embeddings": 4096},
            "flags": ["--lora-rank", "32"], "prompts": 8, "group": 16, "prompt_tokens": 12, "max_tokens": 256,
            "vocab": 103},
}
VARIANTS = {
    "padded": ["--backend-opt", "train_padding_free=false"],
    "packed": [],
    "packed_full_logits": ["--backend-opt", "train_selective_suffix_logits=false"],
}
CUDA_VARIANTS = {"packed_fp32_base": ["--backend-opt", "train_base_dtype=float32"]}


def datums(shape: dict[str, Any], seed: int = 0) -> list[Any]:
    import numpy as np

    from retrain.types import Datum

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(shape["prompts"]):
        prompt = [int(t) for t in rng.integers(3, shape["vocab"], size=shape["prompt_tokens"])]
        for _ in range(shape["group"]):
            n = int(rng.integers(shape["max_tokens"] // 2, shape["max_tokens"] + 1))
            comp = [int(t) for t in rng.integers(3, shape["vocab"], size=n)]
            adv = float(rng.normal()) or 0.1
            out.append(Datum(tokens=prompt + comp, logprobs=[0.0] * len(prompt) + [-2.0] * n,
                             advantages=[0.0] * len(prompt) + [adv] * n, mask=[0] * len(prompt) + [1] * n))
    return out


def worker(name: str, steps: int, device: str) -> dict[str, Any]:
    import torch

    from retrain.backends.local.backend import LocalBackend
    from retrain.validation.load import load_config

    shape = SHAPES[name]
    base = ["--model", "tiny", "--devices", device, "--seed", "0", "--backend-opt", "sample_merged_lora=false",
            *shape["flags"]]
    variants = {**VARIANTS, **(CUDA_VARIANTS if device != "cpu" else {})}
    backends = {v: LocalBackend(load_config(None, [*base, *flags], import_plugins=False).config,
                                model_overrides=shape["model"]) for v, flags in variants.items()}
    rows = datums(shape)
    times: dict[str, list[float]] = {v: [] for v in variants}
    metrics: dict[str, dict[str, Any]] = {}
    for step in range(steps + 1):  # the first step of each is warm-up
        for v, backend in backends.items():
            t0 = time.perf_counter()
            backend.train_step(rows, 1e-5, 0.0)
            elapsed = time.perf_counter() - t0
            m = backend.runtime_metrics()
            if step:
                times[v].append(elapsed)
                metrics[v] = m
    out: dict[str, Any] = {"rows": len(rows), "tokens": sum(len(d.tokens) for d in rows),
                           "threads": torch.get_num_threads(), "device": device,
                           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if device != "cpu":
        out["device_name"] = torch.cuda.get_device_name(0)
    for v in variants:
        m = metrics[v]
        out[v] = {"s_per_step": round(statistics.median(times[v]), 4), "steps": len(times[v]),
                  "train_tokens_per_s": round(out["tokens"] / statistics.median(times[v]), 1),
                  "forward_tokens": m.get("train/forward_tokens"), "packed": m.get("train/packed"),
                  "packing": m.get("train/packing")}
        if "mfu" in m:
            out[v]["mfu"] = m["mfu"]
    padded = out["padded"]["s_per_step"]
    out["padded_over_packed"] = round(padded / out["packed"]["s_per_step"], 3)
    out["full_over_selective"] = round(out["packed_full_logits"]["s_per_step"] / out["packed"]["s_per_step"], 3)
    if "packed_fp32_base" in out:
        out["fp32_over_bf16_base"] = round(out["packed_fp32_base"]["s_per_step"] / out["packed"]["s_per_step"], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="the kit's shape on cuda:0")
    parser.add_argument("--shape", choices=list(SHAPES), action="append")
    parser.add_argument("--steps", type=int, default=0, help="timed steps per variant (default: by shape)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    device = "gpu:0" if args.gpu else "cpu"
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps, device)))
        return
    shapes = args.shape or (["kit"] if args.gpu else ["demo", "smollm2"])
    results = {}
    for name in shapes:
        steps = args.steps or {"demo": 10, "smollm2": 4, "kit": 6}[name]
        cmd = [sys.executable, __file__, "--worker", name, "--steps", str(steps), *(["--gpu"] if args.gpu else [])]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if done.returncode != 0:
            results[name] = {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
            continue
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps({"benchmark": "train_step", "cpus": os.cpu_count(), "load_average": os.getloadavg(),
                      "shapes": results}))


if __name__ == "__main__":
    main()
