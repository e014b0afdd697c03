"""Benchmark: retrain's sampling engine against transformers' `generate`, same model, prompts
and sampling parameters (temperature 1, no truncation, the model's EOS). Prints ONE JSON
object whose `results` hold, per shape, tokens/s of both and their peak memory.

CPU shapes (random weights, fp32, the machine's usable CPUs as threads):
  tiny        the demo's model (Qwen3, 0.8M parameters), 2 prompts x 8 samples x 64 tokens
  demo-step   the demo's model at the demo's RL step: 16 prompts x 8 samples x 12 tokens
  llama-135m  SmolLM2-135M's shape (llama, 30 layers, vocab 49,152), 2 x 8 x 64 tokens
  qwen3_5     Qwen3.5's hybrid text model, small: 8 layers (3 Gated DeltaNet to 1 full
              attention, as the hub's), hidden 256, vocab 8,192, 2 x 8 x 64 tokens
  gemma3      Gemma 3's text model, small: 8 layers (5 sliding to 1 full, a 16-token window
              shorter than the sequence), hidden 256, vocab 8,192, 2 x 8 x 64 tokens
  gemma4      Gemma 4's text model, small: as gemma3 plus per-layer input embeddings,
              soft-capped logits and shared-KV layers, 2 x 8 x 64 tokens
  gpt_oss     gpt-oss's MoE, small: 8 layers (sliding, a 16-token window, and full in turn, with
              attention sinks), 16 experts, 4 per token, hidden 256, vocab 8,192, 2 x 8 x 64 tokens
  deepseek_v3 DeepSeek-V3's MoE, small: 8 layers (the first dense), multi-head latent attention,
              16 routed experts in 4 groups (4 per token from 2 groups) and a shared one,
              hidden 256, vocab 8,192, 2 x 8 x 64 tokens
GPU shapes (`--gpu`; fp32 weights under bf16 autocast, as the local backend trains):
  first-light  the GPU kit's RL policy (Qwen3, 28 layers, hidden 1024, the tiny tokenizer's
               103-token vocabulary), 8 prompts x 16 samples x 256 tokens
  qwen3-0.6b   the same body with Qwen3-0.6B's 151,936-token vocabulary
  qwen3_5-0.8b Qwen3.5-0.8B's text body (24 layers, 18 Gated DeltaNet to 6 full attention,
               hidden 1024, vocab 248,320), 8 prompts x 16 samples x 128 tokens
  gemma4-e2b   Gemma 4 E2B's text body (35 layers, 4 sliding (window 512) to 1 full, 20
               shared-KV layers, per-layer inputs, vocab 262,144), 8 x 16 x 128 tokens
  gpt-oss-20b  gpt-oss-20b's layers (hidden 2880, 64 heads of 64, 32 experts, 4 per token,
               window 128, vocab 201,088) at 4 of its 24 layers, 8 x 16 x 128 tokens
  deepseek-16b a 16B DeepSeek-V3-architecture body's layers (Moonlight-16B-A3B's: hidden 2048,
               latent attention with a 512 KV rank, 64 experts, 6 per token, 2 shared, vocab
               163,840) at 4 of its 27 layers (the first dense), 8 x 16 x 128 tokens
On the GPU also `retrain_no_graphs_tokens_per_s` (sample_cuda_graphs = false) and the share
of the memory-bandwidth bound reached: bytes a decoding step must read (bf16 weights that are
multiplied, not looked up; each attention layer's KV cache written so far, within its window;
each linear-attention layer's recurrent state) over the decode time, against the card's peak
bandwidth. `--budget-s` (default 100, inside the GPU kit's two minutes) skips what would start
after it, each skip named in the row.

CPU runs are one fresh process per (engine, shape), interleaved over rounds (medians); the
GPU run is one process (the GPU kit's time box).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from support.isolated import environment, measure, run_worker

PROMPT_LENGTHS = (9, 14, 11, 17, 8, 20, 12, 15, 10, 16, 13, 18, 9, 19, 11, 14)
SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {"model": "tiny", "prompts": 2, "samples": 8, "tokens": 64},
    "demo-step": {"model": "tiny", "prompts": 16, "samples": 8, "tokens": 12},
    "llama-135m": {"model": dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                                 num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                                 max_position_embeddings=8192, rope_theta=100000.0, tie_word_embeddings=True,
                                 rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=0),
                   "prompts": 2, "samples": 8, "tokens": 64},
    "first-light": {"model": dict(model_type="qwen3", vocab_size=103, hidden_size=1024, intermediate_size=3072,
                                  num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                                  max_position_embeddings=4096, tie_word_embeddings=True, bos_token_id=1,
                                  eos_token_id=2, pad_token_id=0),
                    "prompts": 8, "samples": 16, "tokens": 256},
}
SHAPES["qwen3-0.6b"] = {**SHAPES["first-light"], "model": {**SHAPES["first-light"]["model"], "vocab_size": 151936}}
SMALL: dict[str, Any] = dict(vocab_size=8192, hidden_size=256, intermediate_size=768, num_hidden_layers=8,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
                             tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)
GEMMA_LAYERS = ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] + ["full_attention"]
SHAPES["qwen3_5"] = {"model": dict(SMALL, model_type="qwen3_5_text", linear_key_head_dim=64, linear_value_head_dim=64,
                                   linear_num_key_heads=2, linear_num_value_heads=4,
                                   layer_types=["linear_attention"] * 3 + ["full_attention"] +
                                   ["linear_attention"] * 3 + ["full_attention"]),
                     "prompts": 2, "samples": 8, "tokens": 64}
SHAPES["gemma3"] = {"model": dict(SMALL, model_type="gemma3_text", sliding_window=16, layer_types=GEMMA_LAYERS),
                    "prompts": 2, "samples": 8, "tokens": 64}
SHAPES["gemma4"] = {"model": dict(SMALL, model_type="gemma4_text", sliding_window=16, layer_types=GEMMA_LAYERS,
                                  global_head_dim=128, final_logit_softcapping=30.0, vocab_size_per_layer_input=8192,
                                  hidden_size_per_layer_input=64, num_kv_shared_layers=2),
                    "prompts": 2, "samples": 8, "tokens": 64}
QWEN35_LAYERS = (["linear_attention"] * 3 + ["full_attention"]) * 6
GPT_OSS_LAYERS = ["sliding_attention", "full_attention"] * 12
SHAPES["qwen3_5-0.8b"] = {"model": dict(model_type="qwen3_5_text", vocab_size=248320, hidden_size=1024,
                                        intermediate_size=3584, num_hidden_layers=24, num_attention_heads=8,
                                        num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
                                        linear_num_value_heads=16, linear_key_head_dim=128,
                                        linear_value_head_dim=128, linear_conv_kernel_dim=4,
                                        layer_types=QWEN35_LAYERS, max_position_embeddings=4096,
                                        tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0),
                          "prompts": 8, "samples": 16, "tokens": 128}
SHAPES["gemma4-e2b"] = {"model": dict(model_type="gemma4_text", vocab_size=262144, hidden_size=1536,
                                      intermediate_size=6144, num_hidden_layers=35, num_attention_heads=8,
                                      num_key_value_heads=1, head_dim=256, global_head_dim=512, sliding_window=512,
                                      layer_types=(["sliding_attention"] * 4 + ["full_attention"]) * 7,
                                      num_kv_shared_layers=20, use_double_wide_mlp=True,
                                      vocab_size_per_layer_input=262144, hidden_size_per_layer_input=256,
                                      final_logit_softcapping=30.0, max_position_embeddings=4096,
                                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0),
                        "prompts": 8, "samples": 16, "tokens": 128}
SHAPES["gpt_oss"] = {"model": dict(SMALL, model_type="gpt_oss", sliding_window=16, layer_types=GPT_OSS_LAYERS[:8],
                                   num_local_experts=16, num_experts_per_tok=4, intermediate_size=256),
                     "prompts": 2, "samples": 8, "tokens": 64}
SHAPES["deepseek_v3"] = {"model": dict(SMALL, model_type="deepseek_v3", num_key_value_heads=4, head_dim=16, q_lora_rank=128,
                                       kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
                                       n_routed_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2,
                                       n_shared_experts=1, first_k_dense_replace=1, moe_intermediate_size=128),
                         "prompts": 2, "samples": 8, "tokens": 64}
SHAPES["gpt-oss-20b"] = {"model": dict(model_type="gpt_oss", vocab_size=201088, hidden_size=2880, intermediate_size=2880,
                                       num_hidden_layers=4, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                                       num_local_experts=32, num_experts_per_tok=4, sliding_window=128,
                                       layer_types=GPT_OSS_LAYERS[:4], max_position_embeddings=131072,
                                       tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0),
                         "prompts": 8, "samples": 16, "tokens": 128}
SHAPES["deepseek-16b"] = {"model": dict(model_type="deepseek_v3", vocab_size=163840, hidden_size=2048,
                                        intermediate_size=11264, moe_intermediate_size=1408, num_hidden_layers=4,
                                        num_attention_heads=16, num_key_value_heads=16, q_lora_rank=None,
                                        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                                        n_routed_experts=64, num_experts_per_tok=6, n_group=1, topk_group=1,
                                        n_shared_experts=2, first_k_dense_replace=1, routed_scaling_factor=2.446,
                                        max_position_embeddings=8192, tie_word_embeddings=False, bos_token_id=1,
                                        eos_token_id=2, pad_token_id=0),
                          "prompts": 8, "samples": 16, "tokens": 128}
CPU_SHAPES = ("tiny", "demo-step", "llama-135m", "qwen3_5", "gemma3", "gemma4", "gpt_oss", "deepseek_v3")
GPU_SHAPES = ("first-light", "qwen3-0.6b", "qwen3_5-0.8b", "gemma4-e2b", "gpt-oss-20b", "deepseek-16b")
#: peak memory bandwidth, bytes/s, by a substring of the device name
BANDWIDTH = {"H200": 4.8e12, "H100 SXM": 3.35e12, "H100": 3.35e12, "A100-SXM4-80GB": 2.04e12, "A100": 1.56e12,
             "L40S": 0.864e12, "RTX 4090": 1.008e12}
EOS, PAD = 2, 0


def build(shape: str, device: str) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = SHAPES[shape]["model"]
    if spec == "tiny":
        from retrain.models.tiny import ASSETS

        spec = json.loads((ASSETS / "config.json").read_text())
    raw = dict(spec)
    from retrain.models.quiet import import_model_classes

    import_model_classes()  # the families' modeling modules, their third-party fallback lines quieted
    config = AutoConfig.for_model(raw.pop("model_type"), **raw)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config)
    return model.eval()


def prompts(shape: str) -> list[list[int]]:
    s = SHAPES[shape]
    return [[3 + (7 * p + 5 * j) % 90 for j in range(PROMPT_LENGTHS[p % len(PROMPT_LENGTHS)])]
            for p in range(s["prompts"])]


def sampler(engine: str, shape: str, device: str) -> tuple[Any, Any]:
    """(a step that samples the shape once, a function that counts the tokens it made)."""
    import torch

    from retrain.inference_engine.pytorch.sample import SampleStats, generate
    from retrain.types import SamplingParams

    model = build(shape, device)
    s = SHAPES[shape]
    rows = prompts(shape)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else None
    made: dict[str, Any] = {"tokens": 0, "stats": None, "model": model}

    def ours(decoder: str, graphs: bool) -> Any:
        def step() -> None:
            stats = SampleStats()
            gen = torch.Generator(device=device).manual_seed(0)
            with autocast or _null():
                out = generate(model, rows, s["samples"], SamplingParams(max_tokens=s["tokens"]), [EOS], PAD, gen,
                               stats=stats, decoder=decoder, cuda_graphs=graphs)
            made["tokens"] = sum(len(c.token_ids) for g in out for c in g)
            made["stats"] = stats
        return step

    def theirs() -> None:
        width = max(len(r) for r in rows)
        ids = torch.tensor([[PAD] * (width - len(r)) + r for r in rows], device=device)
        mask = (torch.arange(width, device=device)[None] >= torch.tensor([width - len(r) for r in rows],
                                                                          device=device)[:, None]).long()
        torch.manual_seed(0)
        with torch.inference_mode(), autocast or _null():
            out = model.generate(ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                 max_new_tokens=s["tokens"], num_return_sequences=s["samples"], eos_token_id=EOS,
                                 pad_token_id=PAD)
        new = out[:, width:]
        ended = (new == EOS).int().cumsum(-1)
        made["tokens"] = int(((ended == 0) | ((ended == 1) & (new == EOS))).sum())

    step = {"retrain": ours("auto", True), "retrain_no_graphs": ours("auto", False),
            "retrain_transformers_forward": ours("transformers", True), "generate": theirs}[engine]
    return step, made


def _null() -> Any:
    import contextlib

    return contextlib.nullcontext()


def worker(engine: str, shape: str) -> None:
    import torch

    from retrain.process.cpus import cpu_threads

    torch.set_num_threads(cpu_threads(0)[0])
    step, made = sampler(engine, shape, "cpu")
    result = measure(step, cuda=False, warmup=1)
    result["tokens"] = made["tokens"]
    print(json.dumps(result))


def cpu(rounds: int, shapes: tuple[str, ...]) -> dict[str, Any]:
    engines = ("retrain", "generate", "retrain_transformers_forward")
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {(e, s): [] for e in engines for s in shapes}
    for _ in range(rounds):
        for key in runs:
            runs[key].append(run_worker(__file__, ["--worker", *key]))
    results = []
    for shape in shapes:
        row: dict[str, Any] = {"shape": shape, "device": "cpu", **{k: SHAPES[shape][k] for k in ("prompts", "samples", "tokens")}}
        for engine in engines:
            ok = [r for r in runs[(engine, shape)] if r.get("status") == "ok"]
            if not ok:
                row[f"{engine}_error"] = runs[(engine, shape)][-1].get("stderr", "")[-600:]
                continue
            rates = sorted(r["tokens"] / r["time_s"] for r in ok)
            row[f"{engine}_tokens_per_s"] = round(rates[len(rates) // 2], 1)
            row[f"{engine}_tokens_per_s_runs"] = [round(x, 1) for x in rates]
            peak = max(int(r["extra_peak_bytes"]) for r in ok)
            row["peak_bytes" if engine == "retrain" else f"{engine}_peak_bytes"] = peak
        if "retrain_tokens_per_s" in row and "generate_tokens_per_s" in row:
            row["speedup_vs_generate"] = round(row["retrain_tokens_per_s"] / row["generate_tokens_per_s"], 2)
        results.append(row)
    return {"benchmark": "sampling", "rounds": rounds, "results": results, "environment": environment(False)}


def gpu(shapes: list[str], engines: list[str], budget_s: float) -> dict[str, Any]:
    import torch

    name = torch.cuda.get_device_name()
    peak_bw = next((bw for key, bw in BANDWIDTH.items() if key in name), None)
    start = time.perf_counter()
    results = []
    for shape in shapes:
        row: dict[str, Any] = {"shape": shape, "device": name, **{k: SHAPES[shape][k] for k in ("prompts", "samples", "tokens")}}
        for engine in engines:
            if time.perf_counter() - start > budget_s:
                row[f"{engine}_skipped"] = f"the {budget_s:.0f} s budget was spent before it started"
                continue
            try:
                step, made = sampler(engine, shape, "cuda")
                result = measure(step, cuda=True, warmup=1 if engine != "generate" else 0)
            except Exception as exc:  # one engine failing must not hide the others' figures
                row[f"{engine}_error"] = f"{type(exc).__name__}: {exc}"[:600]
                continue
            rate = made["tokens"] / result["time_s"]
            row[f"{engine}_tokens_per_s"] = round(rate, 1)
            row["peak_bytes" if engine == "retrain" else f"{engine}_peak_bytes"] = result["extra_peak_bytes"]
            stats = made["stats"]
            if engine == "retrain" and stats is not None:
                row.update(_bandwidth(shape, made["model"], stats, peak_bw))
                row.update({"decoder": stats.decoder, "decoder_note": stats.decoder_note,
                            "graph_captures": stats.graph_captures, "graph_replays": stats.graph_replays,
                            "compactions": stats.compactions, "decode_steps": stats.decode_steps,
                            "prefill_s": round(stats.prefill_s, 4), "decode_s": round(stats.decode_s, 4)})
            del step, made
            torch.cuda.empty_cache()
        if "retrain_tokens_per_s" in row and "generate_tokens_per_s" in row:
            row["speedup_vs_generate"] = round(row["retrain_tokens_per_s"] / row["generate_tokens_per_s"], 2)
        results.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return {"benchmark": "sampling", "results": results, "peak_bandwidth_bytes_per_s": peak_bw,
            "budget_s": budget_s, "environment": environment(True)}


def _bandwidth(shape: str, model: Any, stats: Any, peak_bw: float | None) -> dict[str, Any]:
    """Bytes the decode steps had to read, from the shape's config: every bf16 weight that is
    multiplied once per step (embedding tables are looked up, a tied LM head is read whole);
    per active row and step, each attention layer's keys and values written so far (about half
    the final row on average, at most its sliding window; a shared-KV layer reads its source's
    cache again) and each linear-attention layer's fp32 recurrent state, read and written."""
    import torch

    m = SHAPES[shape]["model"]
    params = {id(p): p.numel() for p in model.parameters()}
    looked_up = {id(mod.weight) for mod in model.modules() if isinstance(mod, torch.nn.Embedding)}
    head = model.get_output_embeddings()
    multiplied = sum(n for k, n in params.items() if k not in looked_up)
    if head is not None and id(head.weight) in looked_up:
        multiplied += head.weight.numel()
    weight_bytes = 2 * multiplied
    layers = m["num_hidden_layers"]
    kinds = m.get("layer_types") or ["full_attention"] * layers
    context = (SHAPES[shape]["tokens"] + max(PROMPT_LENGTHS)) / 2
    row_bytes = 0.0
    for kind in kinds:
        if kind == "linear_attention":
            state = m["linear_num_value_heads"] * m["linear_key_head_dim"] * m["linear_value_head_dim"]
            row_bytes += 2 * 4 * state
            continue
        full = kind == "full_attention"
        head_dim = m.get("global_head_dim", m["head_dim"]) if full else m["head_dim"]
        span = context if full else min(context, m.get("sliding_window") or context)
        row_bytes += 2 * 2 * m["num_key_value_heads"] * head_dim * span
    moved = weight_bytes * stats.decode_steps + stats.row_steps * row_bytes
    achieved = moved / stats.decode_s if stats.decode_s > 0 else 0.0
    return {"weight_bytes": weight_bytes, "achieved_bytes_per_s": round(achieved),
            "bandwidth_fraction": round(achieved / peak_bw, 4) if peak_bw else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="the GPU shapes on CUDA")
    parser.add_argument("--shapes", default="", help="comma list (default: all of the device's)")
    parser.add_argument("--rounds", type=int, default=3, help="CPU rounds (medians)")
    parser.add_argument("--engines", default="retrain,retrain_no_graphs,generate", help="GPU: comma list")
    parser.add_argument("--budget-s", type=float, default=100.0, help="GPU: start nothing after this many seconds")
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "SHAPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    if args.gpu:
        shapes = [s for s in args.shapes.split(",") if s] or list(GPU_SHAPES)
        print(json.dumps(gpu(shapes, [e for e in args.engines.split(",") if e], args.budget_s)))
        return
    start = time.perf_counter()
    out = cpu(args.rounds, tuple(s for s in args.shapes.split(",") if s) or CPU_SHAPES)
    out["wall_s"] = round(time.perf_counter() - start, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
