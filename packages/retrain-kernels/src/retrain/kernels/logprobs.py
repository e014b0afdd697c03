"""Selected-token logprobs (and entropies) of an LM head without an [N, V] logits tensor.

For hidden states h [N, H], head weight W [V, H] (optional bias b [V], optional LoRA delta
s·B A) and temperature T, the scaled logits are z = (h Wᵀ + s·(h Aᵀ) Bᵀ + b) / T and per row

    logprob = z[target] − LSE(z),    entropy = LSE(z) − Σ softmax(z) ⊙ z.

Contract:
- results are fp32 whatever the input dtype; bf16/fp16 operands are multiplied with fp32
  accumulation and everything after the product is fp32;
- rows whose target is `ignore_index` give logprob 0, entropy 0 and no gradient;
- with `floor` [N] (a sampler's truncation: top-p, top-k, min-p), a row's scaled logits below
  its floor leave its normalisation, the target's always counts: logprob = z[target] −
  LSE(z over the kept set) and entropy is the kept distribution's. `−inf` keeps every id;
- differentiable w.r.t. hidden, weight, bias and the LoRA factors. No [N, V] tensor exists:
  at most about `chunk_size × V` logits are alive at once (see "Chunks" below);
- the torch path and the Triton path compute the same quantities; `reference_selected_logprobs`
  is the naive definition (full fp32 logits, log_softmax, gather) the tests hold both to.

Chunks. A frozen head on the torch path (the LoRA case) takes row chunks of full vocabulary
rows and forms ∂logprob/∂h (and ∂entropy/∂h) in the forward, so the backward is a row scaling:
two GEMMs in all, as for the naive path. Every other case streams the vocabulary: the forward
keeps per-row running statistics over vocabulary chunks (an online log-sum-exp), and the
backward recomputes each chunk's logits and turns them into grad_h (accumulated in fp32) and
that chunk's rows of grad_W (written once). Forward and backward cut the vocabulary at the same
places with the same products, so the recomputed logits are bitwise the forward's and the
saved statistics normalise them exactly; a mismatch would be amplified by the onehot − p
cancellation when logits are large.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch

from retrain.kernels.accelerators import choose_path, record
from retrain.kernels.lora_head import LoRAHead
from retrain.kernels.matmul import F32, emits_f32, mm_f32, mm_f32_acc, mm_into
from retrain.kernels.naive import (
    reference_selected_logprobs as reference_selected_logprobs,  # the oracle, re-exported
)

LowRank = tuple[torch.Tensor, torch.Tensor]  # (u = s·h Aᵀ [N, r], B [V, r])

# Default logits per chunk (`chunk_size = 0`). torch, frozen head: one or two fp32 buffers of
# full-vocabulary rows (128 MiB; ≥ 200 rows keeps CPU GEMMs at full speed). torch, streamed
# vocabulary: one or two fp32 [N, cols] buffers (32 MiB; GEMMs stay large through N). Triton:
# one logit-gradient buffer in the operand dtype (256 MiB in bf16).
TORCH_ROW_CHUNK_ELEMENTS = 1 << 25
TORCH_VOCAB_CHUNK_ELEMENTS = 1 << 23
TRITON_CHUNK_ELEMENTS = 1 << 27


def selected_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    lora: LoRAHead | None = None,
    temperature: float = 1.0,
    return_entropy: bool = False,
    ignore_index: int = -100,
    chunk_size: int = 0,
    path: str | None = None,
    floor: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """logprobs [...] (and entropies [...]) of `targets` [...] under hidden [..., H] · Wᵀ.

    `floor` [...] (fp32, like `targets`): each row's truncation in scaled-logit units (see
    the module docstring); None keeps every vocabulary id of every row.

    `chunk_size` bounds the logits alive at once to about `chunk_size × V` (0: about
    `*_CHUNK_ELEMENTS`); `path` (`auto|triton|torch`) overrides the mode installed in
    `retrain.kernels.accelerators`, which also records the path taken.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    h = hidden.reshape(-1, hidden.shape[-1])
    t = targets.reshape(-1)
    fl = floor.reshape(-1).to(F32) if floor is not None else None
    if fl is not None and fl.shape != t.shape:
        raise ValueError(f"floor shape {tuple(floor.shape)} != targets' {tuple(targets.shape)}")  # type: ignore[union-attr]
    _check_shapes(h, weight, t, bias, lora)
    _check_targets(t, weight.shape[0], ignore_index)
    if t.numel() == 0:  # nothing to compute; keep the graph so `.backward()` still works
        empty = h.sum(dim=1, dtype=F32)
        return (empty, empty.clone()) if return_entropy else empty
    low = _low_rank(h, lora) if lora is not None else None

    chosen = choose_path([h, weight], path=path, unsupported=_triton_unsupported(h, weight, low))
    record("logprob", chosen)
    impl: _Impl = _TRITON if chosen == "triton" else _TORCH
    eager = (
        chosen == "torch"
        and torch.is_grad_enabled()
        and h.requires_grad
        and low is None
        and not weight.requires_grad
        and (bias is None or not bias.requires_grad)
    )
    lp, ent = _SelectedLogprobs.apply(
        h, weight, bias, *(low or (None, None)), t, fl,
        1.0 / temperature, ignore_index, return_entropy, chunk_size, impl, eager,
    )
    lp = lp.reshape(targets.shape)
    return (lp, ent.reshape(targets.shape)) if return_entropy else lp


def _check_shapes(h: torch.Tensor, weight: torch.Tensor, t: torch.Tensor,
                  bias: torch.Tensor | None, lora: LoRAHead | None) -> None:
    v, hdim = weight.shape
    if h.shape[1] != hdim:
        raise ValueError(f"hidden size {h.shape[1]} != weight's {hdim}")
    if h.shape[0] != t.shape[0]:
        raise ValueError(f"{h.shape[0]} hidden rows but {t.shape[0]} targets")
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"targets must be int32/int64, got {t.dtype}")
    if bias is not None and bias.shape != (v,):
        raise ValueError(f"bias shape {tuple(bias.shape)} != ({v},)")
    if lora is not None and (lora.a.shape[1] != hdim or lora.b.shape != (v, lora.a.shape[0])):
        raise ValueError(f"LoRA head shapes A {tuple(lora.a.shape)}, B {tuple(lora.b.shape)} "
                         f"do not fit weight [{v}, {hdim}]")


def _check_targets(t: torch.Tensor, vocab: int, ignore_index: int) -> None:
    # One host sync. The Triton path would silently read a wrong logit for an id out of range.
    bad = ((t < 0) | (t >= vocab)) & (t != ignore_index)
    if t.numel() and bool(bad.any()):
        raise ValueError(f"target ids must be in [0, {vocab}) or ignore_index={ignore_index}")


def _low_rank(h: torch.Tensor, lora: LoRAHead) -> LowRank:
    x = lora.dropout(h) if lora.dropout is not None else h
    u = (x.to(lora.a.dtype) @ lora.a.t()) * lora.scaling
    return u.to(lora.b.dtype), lora.b


def _triton_unsupported(h: torch.Tensor, weight: torch.Tensor, low: LowRank | None) -> str | None:
    floats = (torch.float32, torch.bfloat16, torch.float16)
    if h.dtype not in floats or h.dtype != weight.dtype:
        return f"hidden {h.dtype} / weight {weight.dtype} (need one of fp32, bf16, fp16, equal)"
    if low is not None and low[1].dtype not in floats:
        return f"LoRA head dtype {low[1].dtype}"
    return None


class RowStats(NamedTuple):
    """Per-row forward statistics, fp32 [N], relative to the row's largest logit `top`.

    LSE = top + log_norm; logprob = target − log_norm; E_p[z] = top + log_norm − entropy.
    Keeping `top` apart matters: LSE itself rounds to ulp(top), which for logits of order
    1e3 is ~6e-5 and would leave Σ exp(z − LSE) visibly ≠ 1 in the backward.
    """

    top: torch.Tensor  # max_v z
    log_norm: torch.Tensor  # log Σ_v exp(z − top)
    target: torch.Tensor  # z[target] − top
    entropy: torch.Tensor | None


def merge_slices(mx: torch.Tensor, se: torch.Tensor, sz: torch.Tensor | None,
                 zt: torch.Tensor) -> RowStats:
    """Combine per-vocabulary-slice partials, each [slices, N].

    Slice s holds its max `mx`, `se = Σ exp(z − mx)`, `sz = Σ exp(z − mx)(z − mx)` and the
    target's logit where the target falls in the slice (else 0). Everything is re-based to
    the global max before summing, so no term is large.
    """
    top = mx.amax(dim=0)
    scale = torch.exp(mx - top)
    norm = (se * scale).sum(dim=0)
    log_norm = torch.log(norm)
    entropy = None
    if sz is not None:
        entropy = log_norm - (scale * (sz + se * (mx - top))).sum(dim=0) / norm
    return RowStats(top, log_norm, zt.sum(dim=0) - top, entropy)


class _Impl(Protocol):
    """What a path provides: forward statistics and the logit gradient of a vocabulary chunk.

    `t_local` holds each row's target id relative to the chunk, −1 where it lies outside.
    """

    def default_elements(self, eager: bool) -> int: ...

    def vocab_cols(self, budget: int, h: torch.Tensor) -> int: ...

    def operand(self, x: torch.Tensor) -> torch.Tensor: ...

    def stats(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
              low: LowRank | None, t: torch.Tensor, inv_t: float, want_entropy: bool,
              cols: int, scratch: _Scratch, floor: torch.Tensor | None) -> RowStats: ...

    def logit_grad(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                   low: LowRank | None, t_local: torch.Tensor, stats: RowStats,
                   g_lp: torch.Tensor, g_ent: torch.Tensor | None, inv_t: float,
                   scratch: _Scratch, floor: torch.Tensor | None) -> torch.Tensor: ...


def _chunks(n: int, step: int) -> list[tuple[int, int]]:
    return [(i, min(i + step, n)) for i in range(0, n, step)]


def _columns(w: torch.Tensor, b: torch.Tensor | None, low: LowRank | None, v0: int, v1: int,
             ) -> tuple[torch.Tensor, torch.Tensor | None, LowRank | None]:
    """The head restricted to vocabulary ids [v0, v1)."""
    return (w[v0:v1], b[v0:v1] if b is not None else None,
            (low[0], low[1][v0:v1]) if low is not None else None)


def _local_targets(t: torch.Tensor, v0: int, v1: int) -> torch.Tensor:
    return torch.where((t >= v0) & (t < v1), t - v0, -1)


# What a logit left out by a row's floor becomes: finite, so that a chunk whose every logit
# is left out still has a finite max (exp(z − max) then counts it with weight exp(−1e30 − top)
# = 0 once merged) and 0 · z stays 0 in the entropy terms.
DROPPED = -1.0e30


def truncate_(z: torch.Tensor, floor: torch.Tensor | None, t_local: torch.Tensor) -> torch.Tensor:
    """Scaled logits z [n, cols] with those below their row's `floor` set to DROPPED, in place;
    the row's target (`t_local`, −1 when outside these columns) is always kept."""
    if floor is None:
        return z
    drop = z < floor[:, None]
    inside = (t_local >= 0).nonzero().squeeze(1)
    drop[inside, t_local[inside]] = False
    return z.masked_fill_(drop, DROPPED)


class _Scratch:
    """Reusable fp32 chunk buffers. On the CPU every fresh allocation of this size is mmap'd
    and page-faulted anew, which costs about as much as a pass over it; CUDA's caching
    allocator reuses memory by itself, so there buffers are simply allocated."""

    def __init__(self, device: torch.device) -> None:
        self.reuse = device.type == "cpu"
        self.flat: dict[int, torch.Tensor] = {}

    def take(self, slot: int, rows: int, cols: int, device: torch.device) -> torch.Tensor:
        if not self.reuse:
            return torch.empty((rows, cols), dtype=F32, device=device)
        flat = self.flat.get(slot)
        if flat is None or flat.numel() < rows * cols:
            flat = self.flat[slot] = torch.empty(rows * cols, dtype=F32, device=device)
        return flat[: rows * cols].view(rows, cols)


class _TorchImpl:
    """GEMMs from torch (cuBLAS/MKL) with fp32 results and in-place fp32 epilogues."""

    def default_elements(self, eager: bool) -> int:
        return TORCH_ROW_CHUNK_ELEMENTS if eager else TORCH_VOCAB_CHUNK_ELEMENTS

    def vocab_cols(self, budget: int, h: torch.Tensor) -> int:
        return max(1, budget // h.shape[0])

    def operand(self, x: torch.Tensor) -> torch.Tensor:
        # Up-cast low-precision operands once per pass when the GEMM cannot emit fp32 itself.
        return x if emits_f32(x) else x.to(F32)

    def logits(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
               low: LowRank | None, inv_t: float, scratch: _Scratch,
               floor: torch.Tensor | None = None, t_local: torch.Tensor | None = None) -> torch.Tensor:
        """Scaled logits of a chunk, truncated by `floor` (targets `t_local` kept)."""
        z = scratch.take(0, h.shape[0], w.shape[0], h.device)
        mm_into(z, h, w.t())
        if low is not None:
            mm_f32_acc(z, low[0], low[1].t())
        if b is not None:
            z += b.to(F32)
        if inv_t != 1.0:
            z *= inv_t
        if floor is not None and t_local is not None:
            truncate_(z, floor, t_local)
        return z

    def stats(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
              low: LowRank | None, t: torch.Tensor, inv_t: float, want_entropy: bool,
              cols: int, scratch: _Scratch, floor: torch.Tensor | None) -> RowStats:
        parts = []
        for v0, v1 in _chunks(w.shape[0], cols):
            local = _local_targets(t, v0, v1)
            z = self.logits(h, *_columns(w, b, low, v0, v1), inv_t, scratch, floor, local)
            zt = z.gather(1, local.clamp(min=0)[:, None]).squeeze(1).masked_fill_(local < 0, 0)
            mx = z.amax(dim=1)
            z -= mx[:, None]
            sz = None
            if want_entropy:
                e = torch.exp(z, out=scratch.take(1, *z.shape, z.device))
                se, sz = e.sum(dim=1), torch.linalg.vecdot(e, z)
            else:
                se = z.exp_().sum(dim=1)
            parts.append((mx, se, sz, zt))
        mx, se, sz, zt = zip(*parts, strict=True)
        return merge_slices(torch.stack(mx), torch.stack(se),
                            torch.stack(sz) if want_entropy else None, torch.stack(zt))

    def logit_grad(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                   low: LowRank | None, t_local: torch.Tensor, stats: RowStats,
                   g_lp: torch.Tensor, g_ent: torch.Tensor | None, inv_t: float,
                   scratch: _Scratch, floor: torch.Tensor | None) -> torch.Tensor:
        z = self.logits(h, w, b, low, inv_t, scratch, floor, t_local)  # the forward's chunk, bit for bit
        z -= stats.top[:, None]
        if g_ent is not None and stats.entropy is not None:  # needs p and z: a second buffer
            p = torch.sub(z, stats.log_norm[:, None], out=scratch.take(1, *z.shape, z.device))
            p.exp_()
            z -= (stats.log_norm - stats.entropy)[:, None]  # z − E_p[z]
            z *= g_ent[:, None]
            z += g_lp[:, None]
            z *= p
            z *= -inv_t
        else:  # p in place: one buffer
            z -= stats.log_norm[:, None]
            z.exp_()
            z *= (-inv_t * g_lp)[:, None]
        inside = t_local >= 0
        z.scatter_add_(1, t_local.clamp(min=0)[:, None], (inv_t * g_lp * inside)[:, None])
        return z.to(w.dtype)

    def eager_grads(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                    t: torch.Tensor, inv_t: float, want_entropy: bool, rows: int,
                    floor: torch.Tensor | None) -> tuple[RowStats, torch.Tensor, torch.Tensor | None]:
        """Forward statistics plus ∂logprob/∂h (and ∂entropy/∂h) for a frozen head.

        With W frozen the gradient w.r.t. h is linear in the per-row upstream gradients, so
        it can be formed while a row chunk's full logits are in memory: the backward becomes
        a row scaling and the logits are never recomputed.
        """
        n = h.shape[0]
        scratch = _Scratch(h.device)
        parts: list[RowStats] = []
        d_lp = torch.empty((n, w.shape[1]), device=h.device, dtype=F32)
        d_ent = torch.empty_like(d_lp) if want_entropy else None
        for i, j in _chunks(n, rows):
            z = self.logits(h[i:j], w, b, None, inv_t, scratch,
                            floor[i:j] if floor is not None else None, t[i:j])
            top = z.amax(dim=1, keepdim=True)
            z -= top
            target = z.gather(1, t[i:j, None]).squeeze(1)
            entropy = None
            if d_ent is None:
                e = z.exp_()
                norm = e.sum(dim=1, keepdim=True)
            else:
                e = torch.exp(z, out=scratch.take(1, *z.shape, z.device))
                norm = e.sum(dim=1, keepdim=True)
                ez = torch.linalg.vecdot(e, z)[:, None] / norm  # E_p[z] − top
                entropy = (torch.log(norm) - ez).squeeze(1)
                z -= ez
                z *= e
                z *= -inv_t / norm  # −p ⊙ (z − E_p z) / T
                d_ent[i:j] = mm_f32(z.to(w.dtype), w)
            e *= -inv_t / norm  # (onehot − p) / T, the onehot added next
            e.scatter_add_(1, t[i:j, None], torch.full_like(e[:, :1], inv_t))
            d_lp[i:j] = mm_f32(e.to(w.dtype), w)
            parts.append(RowStats(top.squeeze(1), torch.log(norm).squeeze(1), target, entropy))
        fields = zip(*parts, strict=True)
        stats = RowStats(*(torch.cat(x) if x[0] is not None else None for x in fields))
        return stats, d_lp, d_ent


class _TritonImpl:
    def default_elements(self, eager: bool) -> int:
        return TRITON_CHUNK_ELEMENTS

    def vocab_cols(self, budget: int, h: torch.Tensor) -> int:
        # Whole vocabulary tiles: chunk tiles then coincide with the forward's (same rows,
        # same columns, same K order), so the recomputed logits are bitwise the forward's.
        from retrain.kernels.triton.tile import default_tiles

        block = default_tiles(h.device, h.dtype, "logits").block_n
        return max(1, budget // h.shape[0] // block) * block

    def operand(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def stats(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
              low: LowRank | None, t: torch.Tensor, inv_t: float, want_entropy: bool,
              cols: int, scratch: _Scratch, floor: torch.Tensor | None) -> RowStats:
        from retrain.kernels.triton.logprobs import forward_partials  # one pass over V

        return merge_slices(*forward_partials(h, w, b, low, t, inv_t, want_entropy, floor=floor))

    def logit_grad(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                   low: LowRank | None, t_local: torch.Tensor, stats: RowStats,
                   g_lp: torch.Tensor, g_ent: torch.Tensor | None, inv_t: float,
                   scratch: _Scratch, floor: torch.Tensor | None) -> torch.Tensor:
        from retrain.kernels.triton.logprobs import logit_grad

        ez = stats.log_norm - stats.entropy if stats.entropy is not None else None
        return logit_grad(h, w, b, low, t_local, stats.top, stats.log_norm, ez, g_lp,
                          g_ent if ez is not None else None, inv_t, floor=floor)


class _SelectedLogprobs(torch.autograd.Function):
    """(logprobs, entropies); see "Chunks" in the module docstring for the two schedules."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
        u: torch.Tensor | None, lb: torch.Tensor | None, t: torch.Tensor, floor: torch.Tensor | None,
        inv_t: float, ignore_index: int, want_entropy: bool, chunk_size: int,
        impl: _Impl, eager: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        valid = t != ignore_index
        safe = torch.where(valid, t, torch.zeros_like(t))
        vocab = w.shape[0]
        budget = chunk_size * vocab if chunk_size > 0 else impl.default_elements(eager)
        cols = impl.vocab_cols(budget, h)
        ho, wo = impl.operand(h), impl.operand(w)
        d_lp = d_ent = None
        if eager:
            assert isinstance(impl, _TorchImpl)
            rows = max(1, budget // vocab)
            stats, d_lp, d_ent = impl.eager_grads(ho, wo, b, safe, inv_t, want_entropy, rows, floor)
        else:
            low = (impl.operand(u), impl.operand(lb)) if u is not None and lb is not None else None
            scratch = _Scratch(h.device)
            stats = impl.stats(ho, wo, b, low, safe, inv_t, want_entropy, cols, scratch, floor)
        del ho, wo
        zero = torch.zeros((), dtype=F32, device=valid.device)
        lp = torch.where(valid, stats.target - stats.log_norm, zero)
        ent = stats.entropy
        entropy = torch.where(valid, ent, zero) if ent is not None else torch.zeros_like(lp)
        if not want_entropy:
            ctx.mark_non_differentiable(entropy)
        if eager:
            ctx.save_for_backward(valid, d_lp, d_ent)
        else:
            ctx.save_for_backward(valid, h, w, b, u, lb, safe, floor, *stats)
        ctx.config = (inv_t, want_entropy, cols, impl, eager, h.dtype)  # type: ignore[attr-defined]
        return lp, entropy

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, g_lp: torch.Tensor, g_ent: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        inv_t, want_entropy, cols, impl, eager, h_dtype = ctx.config  # type: ignore[attr-defined]
        valid, *saved = ctx.saved_tensors  # type: ignore[attr-defined]
        g_lp = torch.where(valid, g_lp.float(), 0.0)
        g_ent_rows = torch.where(valid, g_ent.float(), 0.0) if want_entropy else None
        untouched = (None,) * 8
        if eager:
            d_lp, d_ent = saved
            grad_h = d_lp * g_lp[:, None]
            if d_ent is not None and g_ent_rows is not None:
                grad_h += d_ent * g_ent_rows[:, None]
            return (grad_h.to(h_dtype), None, None, None, None, *untouched)
        h, w, b, u, lb, t, floor, *stat_fields = saved
        stats = RowStats(*stat_fields)
        needs = ctx.needs_input_grad  # type: ignore[attr-defined]
        need_h, need_w, need_b, need_u, need_lb = needs[:5]
        ho, wo = impl.operand(h), impl.operand(w)
        low = (impl.operand(u), impl.operand(lb)) if u is not None and lb is not None else None
        # Summed over vocabulary chunks: fp32 until the end. Per-chunk rows: written once.
        grad_h = torch.zeros_like(h, dtype=F32) if need_h else None
        grad_u = torch.zeros_like(u, dtype=F32) if need_u and u is not None else None
        grad_w = torch.empty_like(w) if need_w else None
        grad_lb = torch.empty_like(lb) if need_lb and lb is not None else None
        grad_b = torch.empty_like(b) if need_b and b is not None else None
        scratch = _Scratch(h.device)
        for v0, v1 in _chunks(w.shape[0], cols):
            w_c, b_c, low_c = _columns(wo, b, low, v0, v1)
            dr = impl.logit_grad(ho, w_c, b_c, low_c, _local_targets(t, v0, v1), stats,
                                 g_lp, g_ent_rows, inv_t, scratch, floor)
            if grad_h is not None:
                mm_f32_acc(grad_h, dr, w_c)
            if grad_w is not None:
                mm_into(grad_w[v0:v1], dr.t(), ho)
            if grad_b is not None:
                grad_b[v0:v1] = dr.sum(dim=0, dtype=F32)
            if low_c is not None and grad_u is not None:
                mm_f32_acc(grad_u, dr, low_c[1])
            if low_c is not None and grad_lb is not None:
                mm_into(grad_lb[v0:v1], dr.t(), low_c[0])
        return (_cast(grad_h, h), grad_w, grad_b, _cast(grad_u, u), grad_lb, *untouched)


def _cast(grad: torch.Tensor | None, like: torch.Tensor | None) -> torch.Tensor | None:
    return grad.to(like.dtype) if grad is not None and like is not None else None


_TORCH = _TorchImpl()
_TRITON = _TritonImpl()
