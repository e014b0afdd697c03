"""Triton selected-token logprobs: a fused online log-sum-exp forward and a logit-gradient kernel.

Forward: program (i, s) owns a block of rows and the s-th slice of vocabulary tiles; it streams
the slice once, keeping per row a running max `mx`, `se = Σ exp(z − mx)`,
`sz = Σ exp(z − mx)(z − mx)` and the target's logit. Then LSE = mx + log se and
entropy = log se − sz/se: both relative to the max, so no large terms cancel. Nothing of size
[N, V] exists; the per-slice partials ([slices, N]) are merged in torch
(`retrain.kernels.logprobs.merge_slices`). Slicing V gives small N enough programs to fill
the GPU.

Backward: the logit gradient of a vocabulary chunk is recomputed tile by tile into an
[N, chunk] buffer of the operand dtype, and the two weight products run as cuBLAS GEMMs (see
`retrain.kernels.logprobs`). A fully fused backward would need atomic adds into grad_hidden
and grad_weight: faster but run-to-run nondeterministic, and retrain offers strict determinism.
"""

# No `from __future__ import annotations` here: triton ≤ 3.1's interpreter takes a kernel
# parameter for a constexpr only when its annotation is `tl.constexpr` itself, not a string.
import torch
import triton
import triton.language as tl

from retrain.kernels.triton.tile import Tiles, default_tiles, dot_constexprs, dual_dot, pair_args

F32 = torch.float32
# Finite "minus infinity" for the running max: keeps `0 · (m_old − m_new)` at 0 on the first
# tile. A constexpr: compiled kernels may read no other kind of global.
_NEG_BIG = tl.constexpr(-1.0e30)




def _target_programs(device: torch.device) -> int:
    """Forward programs wanted in flight: V is sliced until the grid reaches this size."""
    if device.type != "cuda":
        return 8
    return 4 * torch.cuda.get_device_properties(device).multi_processor_count


LowRank = tuple[torch.Tensor, torch.Tensor]  # (u = s·h Aᵀ [N, r], B [V, r])


@triton.jit
def _stats_kernel(
    a1_ptr, b1_ptr, K1, s_a1m, s_a1k, s_b1k, s_b1n,
    a2_ptr, b2_ptr, K2, s_a2m, s_a2k, s_b2k, s_b2n,
    bias_ptr, tgt_ptr, floor_ptr, mx_ptr, se_ptr, sz_ptr, zt_ptr,
    N, V, tiles_per_slice, inv_t,
    HAS_SECOND: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_FLOOR: tl.constexpr, WANT_ENTROPY: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_K2: tl.constexpr, UPCAST: tl.constexpr, PREC1: tl.constexpr, PREC2: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < N
    tgt = tl.load(tgt_ptr + rows, mask=row_mask, other=-1)
    fl = tl.load(floor_ptr + rows, mask=row_mask, other=float("-inf"))  # a stand-in without HAS_FLOOR
    v_tiles = tl.cdiv(V, BLOCK_N)
    first = tl.program_id(1) * tiles_per_slice
    count = tl.minimum(tiles_per_slice, v_tiles - first)

    mx = tl.full((BLOCK_M,), _NEG_BIG, dtype=tl.float32)
    se = tl.zeros((BLOCK_M,), dtype=tl.float32)
    sz = tl.zeros((BLOCK_M,), dtype=tl.float32)
    zt = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for i in range(0, count):
        cols = (first + i).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
        col_mask = cols < V
        z = dual_dot(a1_ptr, b1_ptr, K1, s_a1m, s_a1k, s_b1k, s_b1n,
                     a2_ptr, b2_ptr, K2, s_a2m, s_a2k, s_b2k, s_b2n,
                     bias_ptr, rows, cols, row_mask, col_mask,
                     HAS_SECOND, HAS_BIAS, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_K2, UPCAST,
                     PREC1, PREC2)
        z = z * inv_t
        if HAS_FLOOR:  # the sampler's truncation: below the floor leaves the sum, the target stays
            z = tl.where((z < fl[:, None]) & (cols[None, :] != tgt[:, None]), _NEG_BIG, z)
        zt += tl.sum(tl.where(cols[None, :] == tgt[:, None], z, 0.0), axis=1)
        z = tl.where(col_mask[None, :], z, float("-inf"))
        mx_new = tl.maximum(mx, tl.max(z, axis=1))
        alpha = tl.exp(mx - mx_new)
        e = tl.exp(z - mx_new[:, None])
        if WANT_ENTROPY:
            shifted = tl.where(col_mask[None, :], z - mx_new[:, None], 0.0)
            sz = alpha * (sz + se * (mx - mx_new)) + tl.sum(e * shifted, axis=1)
        se = se * alpha + tl.sum(e, axis=1)
        mx = mx_new

    out = tl.program_id(1).to(tl.int64) * N + rows
    tl.store(mx_ptr + out, mx, mask=row_mask)
    tl.store(se_ptr + out, se, mask=row_mask)
    tl.store(zt_ptr + out, zt, mask=row_mask)
    if WANT_ENTROPY:
        tl.store(sz_ptr + out, sz, mask=row_mask)


@triton.jit
def _logit_grad_kernel(
    a1_ptr, b1_ptr, K1, s_a1m, s_a1k, s_b1k, s_b1n,
    a2_ptr, b2_ptr, K2, s_a2m, s_a2k, s_b2k, s_b2n,
    bias_ptr, tgt_ptr, floor_ptr, top_ptr, lognorm_ptr, ez_ptr, glp_ptr, gent_ptr, dr_ptr, s_drn,
    N, V, inv_t,
    HAS_SECOND: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_FLOOR: tl.constexpr, ENTROPY_GRAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_K2: tl.constexpr, UPCAST: tl.constexpr, PREC1: tl.constexpr, PREC2: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    col_mask = cols < V
    z = dual_dot(a1_ptr, b1_ptr, K1, s_a1m, s_a1k, s_b1k, s_b1n,
                 a2_ptr, b2_ptr, K2, s_a2m, s_a2k, s_b2k, s_b2n,
                 bias_ptr, rows, cols, row_mask, col_mask,
                 HAS_SECOND, HAS_BIAS, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_K2, UPCAST,
                 PREC1, PREC2)
    z = z * inv_t
    tgt = tl.load(tgt_ptr + rows, mask=row_mask, other=-1)
    if HAS_FLOOR:
        fl = tl.load(floor_ptr + rows, mask=row_mask, other=float("-inf"))
        z = tl.where((z < fl[:, None]) & (cols[None, :] != tgt[:, None]), _NEG_BIG, z)
    top = tl.load(top_ptr + rows, mask=row_mask, other=0.0)
    log_norm = tl.load(lognorm_ptr + rows, mask=row_mask, other=0.0)
    glp = tl.load(glp_ptr + rows, mask=row_mask, other=0.0)
    z = z - top[:, None]  # bitwise the forward's shifted logits: same tiles, same order
    p = tl.exp(z - log_norm[:, None])
    coef = glp[:, None] + tl.zeros_like(z)
    if ENTROPY_GRAD:
        ez = tl.load(ez_ptr + rows, mask=row_mask, other=0.0)
        gent = tl.load(gent_ptr + rows, mask=row_mask, other=0.0)
        coef += gent[:, None] * (z - ez[:, None])
    dz = tl.where(cols[None, :] == tgt[:, None], glp[:, None], 0.0) - p * coef
    dr = dz * inv_t
    ptrs = dr_ptr + rows[:, None] * s_drn + cols[None, :]
    tl.store(ptrs, dr.to(dr_ptr.dtype.element_ty), mask=row_mask[:, None] & col_mask[None, :])


def _pairs(hidden: torch.Tensor, weight: torch.Tensor, low: LowRank | None) -> tuple[object, ...]:
    first = pair_args(hidden, weight.t())
    second = pair_args(low[0], low[1].t()) if low is not None else first
    return (*first, *second)


def _flags(tiles: Tiles, hidden: torch.Tensor, low: LowRank | None,
           bias: torch.Tensor | None) -> dict[str, object]:
    second, rank = (low[0].dtype, low[0].shape[1]) if low is not None else (hidden.dtype, 0)
    return {"HAS_SECOND": low is not None, "HAS_BIAS": bias is not None,
            **dot_constexprs(tiles, hidden.dtype, second, rank)}


def forward_partials(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    low: LowRank | None,
    targets: torch.Tensor,
    inv_t: float,
    want_entropy: bool,
    tiles: Tiles | None = None,
    floor: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Per vocabulary slice and row, [slices, N] each: mx, se, sz (or None), target logit.
    `floor` [N] (fp32): logits below it leave the row's sums, its target excepted.

    `retrain.kernels.logprobs.merge_slices` turns them into per-row statistics.
    """
    n, v = hidden.shape[0], weight.shape[0]
    t = tiles or default_tiles(hidden.device, hidden.dtype, "logits")
    n_blocks, v_tiles = triton.cdiv(n, t.block_m), triton.cdiv(v, t.block_n)
    slices = min(v_tiles, max(1, triton.cdiv(_target_programs(hidden.device), n_blocks)))
    per_slice = triton.cdiv(v_tiles, slices)
    slices = triton.cdiv(v_tiles, per_slice)  # every slice starts inside the vocabulary
    mx, se, sz, zt = torch.empty((4, slices, n), device=hidden.device, dtype=F32)
    _stats_kernel[(n_blocks, slices)](
        *_pairs(hidden, weight, low),
        bias if bias is not None else hidden, targets, floor if floor is not None else mx,
        mx, se, sz, zt, n, v, per_slice, inv_t,
        HAS_FLOOR=floor is not None, WANT_ENTROPY=want_entropy, **_flags(t, hidden, low, bias),
    )
    return mx, se, sz if want_entropy else None, zt


def logit_grad(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    low: LowRank | None,
    targets_local: torch.Tensor,
    top: torch.Tensor,
    log_norm: torch.Tensor,
    ez: torch.Tensor | None,
    g_lp: torch.Tensor,
    g_ent: torch.Tensor | None,
    inv_t: float,
    tiles: Tiles | None = None,
    floor: torch.Tensor | None = None,
) -> torch.Tensor:
    """∂loss/∂(raw logits), [N, V] in the weight's dtype, for the vocabulary `weight` covers.

    `weight` may be a chunk of the head's rows starting at a multiple of the vocabulary tile;
    `targets_local` are then relative to it (−1: elsewhere). `top`, `log_norm` are the
    forward's merged statistics; `ez` is E_p[z] − top (for the entropy term).

    With z = logits/T, p = softmax(z): ∂logprob/∂z = onehot − p and
    ∂entropy/∂z = −p ⊙ (z − E_p[z]); the chain rule through 1/T gives one more factor 1/T.
    """
    n, v = hidden.shape[0], weight.shape[0]
    t = tiles or default_tiles(hidden.device, hidden.dtype, "logits")
    dr = torch.empty((n, v), device=hidden.device, dtype=weight.dtype)
    entropy_grad = g_ent is not None and ez is not None
    _logit_grad_kernel[(triton.cdiv(n, t.block_m), triton.cdiv(v, t.block_n))](
        *_pairs(hidden, weight, low),
        bias if bias is not None else hidden, targets_local, floor if floor is not None else top, top, log_norm,
        ez if entropy_grad else top, g_lp, g_ent if entropy_grad else g_lp, dr, dr.stride(0),
        n, v, inv_t,
        HAS_FLOOR=floor is not None, ENTROPY_GRAD=entropy_grad, **_flags(t, hidden, low, bias),
    )
    return dr
