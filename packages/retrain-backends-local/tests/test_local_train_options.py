"""The training path's options beside packing: the head at every position or only where the
loss reads (`train_selective_suffix_logits`), the compiled head (`train_compile_selective_ce`),
the context crop (`train_supervised_context_tokens`), the frozen base's dtype
(`train_base_dtype`), and how rows are binned into micro-batches."""

from __future__ import annotations

import pytest
import torch

from retrain.backends.local.backend import LocalBackend
from retrain.backends.local.batch import collate, crop_context
from retrain.backends.local.logprobs import CompiledHead
from retrain.backends.local.micro import first_fit, padded_bins
from retrain.backends.local.precision import base_dtype
from retrain.errors import UserError
from retrain.types import Datum


def datums(backend: LocalBackend, n: int = 6) -> list[Datum]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        prompt = backend.tokenizer.encode_prompt(f"{i}+{i + 1}={'?' * i}")
        comp = torch.randint(6, 100, (2 + i % 4,), generator=g).tolist()
        out.append(Datum(tokens=prompt + comp, logprobs=[0.0] * len(prompt) + [-3.0] * len(comp),
                         advantages=[0.0] * len(prompt) + [float(torch.randn((), generator=g))] * len(comp),
                         mask=[0] * len(prompt) + [1] * len(comp)))
    return out


def logprobs(backend: LocalBackend, rows: list[Datum]) -> torch.Tensor:
    batch = collate(rows, backend.tokenizer.pad_token_id, backend.device)
    return backend._new_logprobs(batch, sampled=False)


def test_the_head_at_every_position_gives_the_selective_logprobs(tiny_config) -> None:  # type: ignore[no-untyped-def]
    selective = LocalBackend(tiny_config())
    full = LocalBackend(tiny_config("--backend-opt", "train_selective_suffix_logits=false"))
    rows = datums(selective)
    a, b = logprobs(selective, rows), logprobs(full, rows)
    assert float((a - b).abs().max()) <= 1e-6
    ga = torch.autograd.grad(a.sum(), [p for p in selective.model.parameters() if p.requires_grad])
    gb = torch.autograd.grad(b.sum(), [p for p in full.model.parameters() if p.requires_grad])
    scale = max(float(x.abs().max()) for x in ga)
    assert max(float((x - y).abs().max()) for x, y in zip(ga, gb, strict=True)) <= 1e-6 * max(1.0, scale)


def test_the_compiled_head_gives_the_kernels_logprobs(tiny_config) -> None:  # type: ignore[no-untyped-def]
    """aot_eager traces the graph torch.compile would hand inductor, on the CPU and fast."""
    backend = LocalBackend(tiny_config("--backend-opt", "train_full_model=true"))
    rows = datums(backend)
    want = logprobs(backend, rows)
    compiled = CompiledHead("require", min_tokens=1, backend="aot_eager")
    backend.passes.compiled = compiled
    got = logprobs(backend, rows)
    assert compiled.batches == 1 and float((got - want).abs().max()) <= 1e-5
    g_want = torch.autograd.grad(want.sum(), backend.model.get_output_embeddings().weight)[0]
    g_got = torch.autograd.grad(got.sum(), backend.model.get_output_embeddings().weight)[0]
    assert float((g_got - g_want).abs().max()) <= 1e-5


def test_the_compiled_head_falls_back_or_refuses_by_mode(tiny_config) -> None:  # type: ignore[no-untyped-def]
    backend = LocalBackend(tiny_config("--backend-opt", "train_full_model=true"))
    rows = datums(backend)
    backend.passes.compiled = auto = CompiledHead("auto", min_tokens=10_000)
    logprobs(backend, rows)
    assert auto.batches == 0 and auto.fallback == "below_min_tokens"
    backend.passes.compiled = CompiledHead("require", min_tokens=1)  # inductor: CUDA only
    with pytest.raises(RuntimeError, match="not_cuda"):
        logprobs(backend, rows)
    with pytest.raises(UserError, match="needs a CUDA device"):
        LocalBackend(tiny_config("--backend-opt", "train_compile_selective_ce=require"))


def test_the_context_crop_trains_as_the_cropped_rows_do(tiny_config) -> None:  # type: ignore[no-untyped-def]
    cropping = LocalBackend(tiny_config("--backend-opt", "train_supervised_context_tokens=3"))
    plain = LocalBackend(tiny_config())
    rows = datums(plain)
    cut, metrics = crop_context(rows, 3)
    assert all(len(c.tokens) < len(r.tokens) for c, r in zip(cut, rows, strict=True))
    assert all(list(c.mask or [])[:3] == [0, 0, 0] and (c.mask or [0, 0, 0, 0])[3] == 1 for c in cut)
    assert metrics["local_train_context_rows_cropped"] == len(rows)
    assert metrics["local_train_context_tokens_removed"] == sum(len(r.tokens) - len(c.tokens)
                                                               for c, r in zip(cut, rows, strict=True))
    a = cropping.train_step(rows, 1e-3, 0.0)
    b = plain.train_step(cut, 1e-3, 0.0)
    assert a.loss == pytest.approx(b.loss, abs=1e-7) and a.metrics["local_train_context_rows_cropped"] == len(rows)
    assert crop_context(rows, 0) == (rows, {})


def test_the_frozen_base_dtype(tiny_config) -> None:  # type: ignore[no-untyped-def]
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert base_dtype("auto", cpu, lora=True) == torch.float32
    assert base_dtype("float32", cuda, lora=True) == torch.float32
    if torch.cuda.is_available():
        assert base_dtype("auto", cuda, lora=True) == torch.bfloat16
        assert base_dtype("auto", cuda, lora=False) == torch.float32
    with pytest.raises(UserError, match="needs a CUDA device"):
        base_dtype("bfloat16", cpu, lora=True)
    with pytest.raises(UserError, match="LoRA runs"):
        base_dtype("bfloat16", cuda, lora=False)
    backend = LocalBackend(tiny_config())
    assert {p.dtype for p in backend.model.parameters()} == {torch.float32}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the bf16 base is a CUDA layout")
def test_a_bf16_base_keeps_fp32_adapters_and_samples_from_the_same_weights(tiny_config) -> None:  # type: ignore[no-untyped-def]
    backend = LocalBackend(tiny_config("--devices", "gpu:0"))
    frozen = {p.dtype for p in backend.model.parameters() if not p.requires_grad}
    trained = {p.dtype for p in backend.model.parameters() if p.requires_grad}
    assert frozen == {torch.bfloat16} and trained == {torch.float32}
    out = backend.train_step(datums(backend), 1e-3, 0.0)
    assert out.tokens > 0 and all(s["exp_avg"].dtype == torch.float32 for s in backend.optimizer.state.values())


def test_padded_bins_keep_rows_of_similar_length_under_the_budget() -> None:
    lengths = [5, 9, 3, 9, 4, 12, 7]
    for budget, cap in ((1, 0), (18, 0), (30, 2), (10_000, 0)):
        bins = padded_bins(lengths, budget, cap)
        assert sorted(r for b in bins for r in b) == list(range(len(lengths)))
        for b in bins:
            assert len(b) == 1 or len(b) * max(lengths[r] for r in b) <= budget
            assert cap == 0 or len(b) <= cap
    assert padded_bins(lengths, 18, 0)[0] == [5]  # longest first: the 12 goes alone, 2 x 12 > 18


def test_packed_bins_hold_prompt_groups_and_cut_them_to_fit() -> None:
    # prompt of 4 tokens; rows 0-3 share it (own 2, 3, 1, 6 tokens), row 4 is its own group
    lengths = [6, 7, 5, 10, 8]
    groups = [(4, [0, 1, 2, 3]), (8, [4])]
    assert first_fit(groups, lengths, 100, 0) == [[0, 1, 2, 3, 4]]
    bins = first_fit(groups, lengths, 12, 0)
    assert sorted(r for b in bins for r in b) == [0, 1, 2, 3, 4]
    for b in bins:
        shared = [r for r in b if r < 4]
        cost = (4 + sum(lengths[r] - 4 for r in shared) if shared else 0) + (8 if 4 in b else 0)
        assert cost <= 12
    assert all(len(b) <= 2 for b in first_fit(groups, lengths, 100, 2))
