"""RL steps of the local backend on 1 and 2 processes (torchrun, gloo, FSDP2) on the CPU (JSON).

The medium profile of local_rl_step.py: 8 prompts x 8 completions x 32 new tokens on a
256-hidden, 6-layer Qwen3 (the tiny config scaled up, random weights); full fine-tuning and
LoRA rank 8. A step samples the batch (each rank its share of the prompts), builds datums and
makes one update; the first two steps are warm-up and not timed. Per rank: peak RSS and the
bytes of trainable parameters and optimizer state the rank holds (FSDP2 shards both, and the
gradients, shaped like the parameters, with them: full fine-tuning holds about half per rank
on 2 processes). Two processes share the
machine's cores, so s/step on a CPU measures the sharding's overhead, not a speed-up.

    uv run python scripts/bench/local_distributed.py
    uv run python scripts/bench/local_distributed.py --modes full --worlds 1,2 --steps 4
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

PROFILE = {"prompts": 8, "group": 8, "new_tokens": 32}  # local_rl_step.py's larger ("medium") size
MODEL = {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 6, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 64}


def _local_bytes(tensors: list[Any]) -> int:
    total = 0
    for t in tensors:
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def worker(mode: str, steps: int) -> dict[str, Any] | None:
    import numpy as np
    import torch

    from retrain.backends.local.backend import LocalBackend
    from retrain.types import Datum, SamplingParams
    from retrain.validation.load import load_config

    flags = ["--model", "tiny", "--devices", "cpu", "--seed", "0", "--lora-rank", "8"]
    if mode == "full":
        flags += ["--backend-opt", "train_full_model=true"]
    backend = LocalBackend(load_config(None, flags, import_plugins=False).config, model_overrides=MODEL)
    tok = backend.tokenizer
    heads = [backend.model.get_base_model().lm_head if mode == "lora" else backend.model.lm_head]
    if backend.sampler is not None:
        heads.append(backend.sampler.model.lm_head)
    ban_eos = torch.zeros(heads[0].out_features)
    ban_eos[tok.eos_token_ids] = -1e9
    for head in heads:  # exactly new_tokens per completion
        head.register_forward_hook(lambda mod, i, o: o + ban_eos)
    rng = np.random.default_rng(0)
    times, generated = [], 0
    p, g, n = PROFILE["prompts"], PROFILE["group"], PROFILE["new_tokens"]
    for step in range(steps + 2):
        batch = [tok.encode_prompt(f"{a}+{b}=") for a, b in rng.integers(0, 10, size=(p, 2))]
        t0 = time.perf_counter()
        out = backend.sample(batch, g, SamplingParams(max_tokens=n))
        datums = []
        for prompt, group in zip(batch, out, strict=True):
            rewards = np.array([float(sum(c.token_ids) % 2) for c in group])
            adv = rewards - rewards.mean()
            for c, a in zip(group, adv, strict=True):
                datums.append(Datum(tokens=prompt + c.token_ids, logprobs=[0.0] * len(prompt) + c.logprobs,
                                    advantages=[0.0] * len(prompt) + [float(a) or 1e-3] * len(c.token_ids)))
        backend.train_step(datums, 1e-4, 0.0)
        if step >= 2:
            times.append(time.perf_counter() - t0)
            generated += sum(len(c.token_ids) for group in out for c in group)
    params = [q for q in backend.model.parameters() if q.requires_grad]
    optimizer = [v for s in backend.optimizer.state.values() for v in s.values()
                 if isinstance(v, torch.Tensor) and v.dim() > 0]
    rank = {
        "rank": backend.world.rank,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "trainable_parameter_mb": round(_local_bytes(params) / 2**20, 3),
        "optimizer_state_mb": round(_local_bytes(optimizer) / 2**20, 3),
        "all_parameter_mb": round(_local_bytes(list(backend.model.parameters())) / 2**20, 3),
    }
    ranks = [rank]
    if backend.world.distributed:
        from retrain.backends.local import distributed

        ranks = distributed.gather(rank, backend.world)
    result = {
        "mode": mode, "processes": backend.world.size, "steps_timed": steps,
        "s_per_step": round(float(np.median(times)), 4),
        "tokens_per_s": round(generated / sum(times), 1),
        "trainable_parameters": backend.trainable_parameters,
        "ranks": ranks,
    }
    backend.close()
    return result if backend.world.leader else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", default="")
    ap.add_argument("--modes", default="full,lora")
    ap.add_argument("--worlds", default="1,2")
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    if args.worker:
        import torch

        torch.set_num_threads(1)
        out = worker(args.worker, args.steps)
        if out is not None:
            print("RESULT " + json.dumps(out))
        return
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    runs = []
    for mode in args.modes.split(","):
        for world in map(int, args.worlds.split(",")):
            launcher = [sys.executable] if world == 1 else [
                sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}"]
            proc = subprocess.run([*launcher, __file__, "--worker", mode, "--steps", str(args.steps)],
                                  capture_output=True, text=True, check=True, env=env)
            line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
            runs.append(json.loads(line[len("RESULT "):]))
    print(json.dumps({"benchmark": "local_distributed", "backend": "gloo (CPU)", "profile": PROFILE,
                      "model": {"vocab": 103, **MODEL}, "cpus": os.cpu_count(), "threads_per_process": 1,
                      "runs": runs}))


if __name__ == "__main__":
    main()
