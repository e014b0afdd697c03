"""RL step of the local backend at two sizes: s/step, sampled tokens/s, peak RSS (JSON).

Each size runs in a fresh process (so peak RSS is its own) on a 256-hidden, 6-layer Qwen3
(the built-in tiny config scaled up, random weights), LoRA rank 8, GRPO, temperature 1.
A step is: sample the group, score it, build datums, one optimizer update. The first two
steps are warm-up and not timed.

    uv run python scripts/bench/local_rl_step.py            # both sizes
    uv run python scripts/bench/local_rl_step.py --worker 2 8 8 10
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

SIZES = [  # (prompts, group, new tokens): 16 x 8 and 64 x 32 completions x tokens
    (2, 8, 8),
    (8, 8, 32),
]
MODEL = {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 6, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 64}


def worker(prompts: int, group: int, new_tokens: int, steps: int) -> dict[str, object]:
    import numpy as np
    import torch

    from retrain.backends.local.backend import LocalBackend
    from retrain.types import Datum, SamplingParams
    from retrain.validation.load import load_config

    config = load_config(None, ["--model", "tiny", "--devices", "cpu", "--seed", "0", "--lora-rank", "8",
                                "--advantage-mode", "grpo", "--transform-mode", "none"], import_plugins=False).config
    backend = LocalBackend(config, model_overrides=MODEL)
    tok = backend.tokenizer
    ban_eos = torch.zeros(backend.model.get_base_model().lm_head.out_features)
    ban_eos[tok.eos_token_ids] = -1e9
    samplers = [backend.model.get_base_model()] + ([backend.sampler.model] if backend.sampler else [])
    hooks = [m.lm_head.register_forward_hook(lambda mod, i, o: o + ban_eos)  # exactly new_tokens each
             for m in samplers]
    rng = np.random.default_rng(0)
    times, sample_times, generated = [], [], 0
    for step in range(steps + 2):
        batch = [tok.encode_prompt(f"{a}+{b}=") for a, b in rng.integers(0, 10, size=(prompts, 2))]
        t0 = time.perf_counter()
        out = backend.sample(batch, group, SamplingParams(max_tokens=new_tokens))
        t1 = time.perf_counter()
        datums = []
        for p, g in zip(batch, out, strict=True):
            rewards = np.array([float(len(c.token_ids) % 2) for c in g])
            adv = rewards - rewards.mean()
            for c, a in zip(g, adv, strict=True):
                datums.append(Datum(tokens=p + c.token_ids, logprobs=[0.0] * len(p) + c.logprobs,
                                    advantages=[0.0] * len(p) + [float(a) or 1e-3] * len(c.token_ids)))
        backend.train_step(datums, 1e-4, 0.0)
        t2 = time.perf_counter()
        if step >= 2:
            times.append(t2 - t0)
            sample_times.append(t1 - t0)
            generated += sum(len(c.token_ids) for g in out for c in g)
    from retrain.backends.local.batch import collate
    from retrain.backends.local.logprobs import action_logprobs

    for h in hooks:  # the gap is measured on the model's own distribution, before any update
        h.remove()
    fresh = backend.sample(batch, group, SamplingParams(max_tokens=new_tokens))
    datums = [Datum(tokens=p + c.token_ids, logprobs=[0.0] * len(p) + c.logprobs,
                    advantages=[0.0] * len(p) + [1.0] * len(c.token_ids))
              for p, g in zip(batch, fresh, strict=True) for c in g]
    batch_t = collate(datums, tok.pad_token_id, backend.device)
    with torch.no_grad():
        train_lp = action_logprobs(backend.model, batch_t.input_ids, batch_t.attention_mask, batch_t.action, 1.0)
    gap = float((train_lp - batch_t.old_logprobs[batch_t.action]).abs().max())
    return {
        "completions": prompts * group,
        "max_sampled_vs_train_logprob_gap": gap, "new_tokens": new_tokens, "steps_timed": steps,
        "s_per_step": round(float(np.median(times)), 4), "s_per_step_mean": round(float(np.mean(times)), 4),
        "sample_s_per_step": round(float(np.median(sample_times)), 4),
        "sampled_tokens_per_s": round(generated / sum(sample_times), 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "trainable_parameters": backend.trainable_parameters,
        "generated_tokens_per_step": generated // steps,
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(*map(int, sys.argv[2:6]))))
        return
    results = []
    for prompts, group, new in SIZES:
        steps = 20 if new <= 8 else 8
        proc = subprocess.run([sys.executable, __file__, "--worker", str(prompts), str(group), str(new), str(steps)],
                              capture_output=True, text=True, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(json.dumps({"benchmark": "local_rl_step", "model": {"vocab": 103, **MODEL}, "lora_rank": 8,
                      "cpus": os.cpu_count(), "sizes": results,
                      "trl_grpo_reference_s_per_step": {"16x8": 0.12, "64x32": 1.5}}))


if __name__ == "__main__":
    main()
