"""Triton fused LoRA product: `C = A1 @ B1 + A2 @ B2 (+ b)` in one pass over the output.

The LoRA forward is `x Wᵀ + (s·x Aᵀ) Bᵀ + b` and its input gradient is `g W + (s·g B) A`:
both are a full-rank product plus a rank-r one. Fusing them writes each output tile once, in
the output dtype, from a single fp32 accumulator, where the unfused form writes the base
output, a second [M, O] LoRA output and their sum.
"""

# No `from __future__ import annotations` here: triton ≤ 3.1's interpreter takes a kernel
# parameter for a constexpr only when its annotation is `tl.constexpr` itself, not a string.
import torch
import triton
import triton.language as tl

from retrain.kernels.triton.tile import Tiles, default_tiles, dot_constexprs, dual_dot, pair_args

# Row blocks that sweep the column blocks together, so B1's column panels stay in L2.
_GROUP_M = 8


@triton.jit
def _dual_matmul_kernel(
    a1_ptr, b1_ptr, K1, s_a1m, s_a1k, s_b1k, s_b1n,
    a2_ptr, b2_ptr, K2, s_a2m, s_a2k, s_b2k, s_b2n,
    bias_ptr, c_ptr, M, N, s_cm, s_cn,
    HAS_BIAS: tl.constexpr, GROUP_M: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_K2: tl.constexpr, UPCAST: tl.constexpr, PREC1: tl.constexpr, PREC2: tl.constexpr,
):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * grid_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < M
    col_mask = cols < N
    acc = dual_dot(a1_ptr, b1_ptr, K1, s_a1m, s_a1k, s_b1k, s_b1n,
                   a2_ptr, b2_ptr, K2, s_a2m, s_a2k, s_b2k, s_b2n,
                   bias_ptr, rows, cols, row_mask, col_mask,
                   True, HAS_BIAS, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_K2, UPCAST, PREC1, PREC2)
    ptrs = c_ptr + rows[:, None] * s_cm + cols[None, :] * s_cn
    tl.store(ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_mask[:, None] & col_mask[None, :])


def dual_matmul(
    a1: torch.Tensor,
    b1: torch.Tensor,
    a2: torch.Tensor,
    b2: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
    tiles: Tiles | None = None,
) -> torch.Tensor:
    """`a1 @ b1 + a2 @ b2 (+ bias)` accumulated in fp32, written once as `out_dtype`.

    `b1`, `b2` are [K, N] views (a transposed weight is fine); each pair shares one dtype.
    """
    m, n = a1.shape[0], b1.shape[1]
    t = tiles or default_tiles(a1.device, a1.dtype, "gemm")
    c = torch.empty((m, n), device=a1.device, dtype=out_dtype)
    grid = (triton.cdiv(m, t.block_m) * triton.cdiv(n, t.block_n),)
    _dual_matmul_kernel[grid](
        *pair_args(a1, b1), *pair_args(a2, b2),
        bias if bias is not None else c, c, m, n, c.stride(0), c.stride(1),
        HAS_BIAS=bias is not None, GROUP_M=_GROUP_M,
        **dot_constexprs(t, a1.dtype, a2.dtype, a2.shape[1]),
    )
    return c
