"""Rollout routing replay (`[inference] routing_replay`) against a bf16 sampler: the
sampler/trainer logprob gap and the spread of the token ratios, with and without replay (JSON).

A tiny Qwen3-MoE (64 hidden, 4 layers, 16 experts, 4 per token, renormalised; random weights
with the routers' and experts' drawn at std 0.3, so that routing decides much of each
layer's output, as in a trained MoE) trains with the local backend on the CPU: LoRA rank 8,
fp32 trainer, while the in-process sampler's merged copy runs in bf16 (the rounding an
inference engine's bf16 adds). Per seed and per arm (replay off, on) a fresh run samples 8
prompts x 4 completions of up to 24 tokens, measures, and takes one update on a toy reward (the
share of odd token ids, group-normalised), `UPDATES` times; the measurement after each update
is on a fresh batch from the updated weights. Measured over every sampled token:

- `gap_mean`, `gap_max`: |trainer logprob - sampler logprob|;
- `ratio_std`: the standard deviation of the token ratios exp(trainer - sampler) (1 with no gap);
- `differing_fraction` (replay arm): the share of (token, routed layer) pairs whose recorded
  experts differ from those the trainer's router would have chosen.

    uv run python scripts/bench/routing_replay.py            # 3 seeds, 3 updates
    uv run python scripts/bench/routing_replay.py --seeds 1 --updates 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

MODEL = dict(vocab_size=120, hidden_size=64, intermediate_size=128, moe_intermediate_size=64, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=16, num_experts_per_tok=4,
             norm_topk_prob=True, mlp_only_layers=[], max_position_embeddings=256, pad_token_id=0, bos_token_id=1,
             eos_token_id=2)
ROUTED_STD = 0.3  # the routers' and experts' weights
PROMPTS, GROUP, NEW_TOKENS = 8, 4, 24


def checkpoint(folder: Path, seed: int) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from retrain.models.quiet import no_progress_bars
    from retrain.models.tiny import ASSETS

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("qwen3_moe", **MODEL))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight") or ".experts." in name:
                p.normal_(0.0, ROUTED_STD)
    with no_progress_bars():
        model.save_pretrained(str(folder))
        AutoTokenizer.from_pretrained(str(ASSETS)).save_pretrained(str(folder))
    return folder


def measure(backend: Any, datums: list[Any]) -> dict[str, float]:
    """The trainer's logprobs of the sampled tokens (replayed when the backend replays) against
    the sampler's."""
    import torch

    from retrain.backends.local.batch import collate
    from retrain.backends.local.logprobs import action_logprobs

    batch = collate(datums, backend.tokenizer.pad_token_id, backend.device)
    replaying = backend.replay.replaying(batch) if backend.replay is not None else contextlib.nullcontext()
    with torch.no_grad(), replaying:
        trainer = action_logprobs(backend.model, batch.input_ids, batch.attention_mask, batch.action, 1.0)
    diff = (trainer - batch.old_logprobs[batch.action]).double()
    return {"gap_mean": float(diff.abs().mean()), "gap_max": float(diff.abs().max()),
            "ratio_std": float(diff.exp().std())}


def datums_of(prompts: list[list[int]], groups: list[list[Any]]) -> list[Any]:
    from retrain.types import Datum

    out = []
    for p, group in zip(prompts, groups, strict=True):
        rewards = [sum(t % 2 for t in c.token_ids) / max(len(c.token_ids), 1) for c in group]
        mean = statistics.fmean(rewards)
        for c, r in zip(group, rewards, strict=True):
            adv = (r - mean) or 1e-3
            out.append(Datum(tokens=p + c.token_ids, logprobs=[0.0] * len(p) + c.logprobs,
                             advantages=[0.0] * len(p) + [adv] * len(c.token_ids),
                             mask=[0] * len(p) + [1] * len(c.token_ids), routes=c.routes))
    return out


def arm(folder: Path, seed: int, replay: bool, updates: int) -> dict[str, Any]:
    import torch

    from retrain.backends.local.backend import LocalBackend
    from retrain.types import SamplingParams
    from retrain.validation.load import load_config

    flags = ["--model", str(folder), "--devices", "cpu", "--seed", str(seed), "--lora-rank", "8", "--temperature",
             "1.0", "--top-p", "1.0", "--max-tokens", str(NEW_TOKENS), "--routing-replay", str(replay).lower()]
    backend = LocalBackend(load_config(None, flags, import_plugins=False).config)
    assert backend.sampler is not None, "the CPU samples from a merged copy"
    backend.sampler.model.to(torch.bfloat16)  # the bf16 sampler
    rng = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 100, (8,), generator=rng).tolist() for _ in range(PROMPTS)]
    rows, differing = [], []
    for u in range(updates + 1):
        groups = backend.sample(prompts, GROUP, SamplingParams(max_tokens=NEW_TOKENS))
        datums = datums_of(prompts, groups)
        rows.append(measure(backend, datums))
        if u < updates:
            backend.train_step(datums, 5e-3, 0.0)
            differing.append(backend.runtime_metrics().get("routing/differing_fraction"))
    out: dict[str, Any] = {k: [round(r[k], 6) for r in rows] for k in rows[0]}
    if replay:
        out["differing_fraction"] = differing
    return out


def summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Means over seeds of: the first batch (before any update), the batches after updates."""
    out = {}
    for key in ("gap_mean", "gap_max", "ratio_std"):
        out[f"{key}_fresh"] = round(statistics.fmean(r[key][0] for r in runs), 6)
        out[f"{key}_after_updates"] = round(statistics.fmean(v for r in runs for v in r[key][1:]), 6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=3)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(2)
    result: dict[str, Any] = {"model": {**MODEL, "routed_std": ROUTED_STD}, "prompts": PROMPTS, "group": GROUP,
                              "new_tokens": NEW_TOKENS, "updates": args.updates, "sampler": "bf16 (CPU)",
                              "trainer": "fp32 (CPU)", "arms": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folders = [checkpoint(Path(tmp) / f"seed{s}", s) for s in range(args.seeds)]
        for name, replay in (("no_replay", False), ("replay", True)):
            runs = [arm(folders[s], s, replay, args.updates) for s in range(args.seeds)]
            result["arms"][name] = {"summary": summary(runs), "seeds": runs}
            if replay:
                fractions = [f for r in runs for f in r["differing_fraction"]]
                result["arms"][name]["summary"]["differing_fraction"] = round(statistics.fmean(fractions), 6)
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
