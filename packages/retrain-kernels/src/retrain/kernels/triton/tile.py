"""The one product every kernel here is built on: an fp32 tile of `A1 @ B1 + A2 @ B2 + b`.

The second pair is the low-rank branch: for LoRA `A2 = x Aᵀ` (rank r) and `B2 = Bᵀ`, for a
LoRA'd LM head likewise. Operands are addressed through explicit strides, so a transposed
weight (`Wᵀ`) is a stride swap, never a copy.

Numerics: products accumulate in fp32 (`tl.dot` with an fp32 accumulator). fp32 operands use
3xTF32 products on the GPU (about fp32 accuracy, unlike plain TF32) and IEEE products under
the interpreter; bf16/fp16 products are exact in fp32. Triton's
CPU interpreter mis-evaluates `tl.dot` on bf16 operands, so under the interpreter the host sets
UPCAST and operands are widened to fp32 first; bf16×bf16 products are exact in fp32, so this
changes nothing but speed.
"""

# No `from __future__ import annotations` here: triton ≤ 3.1's interpreter takes a kernel
# parameter for a constexpr only when its annotation is `tl.constexpr` itself, not a string.
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from retrain.kernels.accelerators import triton_interpreting


@triton.jit
def _accumulate(
    acc, a_ptr, b_ptr, K, s_am, s_ak, s_bk, s_bn, rows, cols, row_mask, col_mask,
    BLOCK_K: tl.constexpr, UPCAST: tl.constexpr, PREC: tl.constexpr,
):
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * s_am + ks[None, :] * s_ak
    b_ptrs = b_ptr + ks[:, None] * s_bk + cols[None, :] * s_bn
    for k0 in range(0, K, BLOCK_K):
        k_ok = ks < K - k0
        a = tl.load(a_ptrs, mask=row_mask[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & col_mask[None, :], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PREC)
        a_ptrs += BLOCK_K * s_ak
        b_ptrs += BLOCK_K * s_bk
    return acc


@triton.jit
def dual_dot(
    a1_ptr, b1_ptr, K1, s_a1m, s_a1k, s_b1k, s_b1n,
    a2_ptr, b2_ptr, K2, s_a2m, s_a2k, s_b2k, s_b2n,
    bias_ptr, rows, cols, row_mask, col_mask,
    HAS_SECOND: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_K2: tl.constexpr, UPCAST: tl.constexpr, PREC1: tl.constexpr, PREC2: tl.constexpr,
):
    """fp32 [BLOCK_M, BLOCK_N] tile at (`rows`, `cols`); `rows`/`cols` are int64 offsets.

    Out-of-range rows and columns read zeros; the caller masks what it stores or reduces.
    The rank-r pair takes its own, smaller K block (`BLOCK_K2`): a full BLOCK_K of a rank-16
    adapter would be mostly zeros and, in fp32, spill registers.
    """
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc = _accumulate(acc, a1_ptr, b1_ptr, K1, s_a1m, s_a1k, s_b1k, s_b1n,
                      rows, cols, row_mask, col_mask, BLOCK_K, UPCAST, PREC1)
    if HAS_SECOND:
        acc = _accumulate(acc, a2_ptr, b2_ptr, K2, s_a2m, s_a2k, s_b2k, s_b2n,
                          rows, cols, row_mask, col_mask, BLOCK_K2, UPCAST, PREC2)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    return acc


@dataclass(frozen=True)
class Tiles:
    """Launch shape: a [block_m, block_n] output tile, K consumed block_k at a time."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 2


# Hopper (H100/H200) tiles, chosen so that ptxas (sm_90a) reports no or small register
# spills for the heaviest variant of each kernel (LoRA pair + bias + entropy); see
# tests/test_kernels_triton_compile.py. Untuned on hardware: no GPU was at hand.
_GPU_TILES = {
    ("logits", False): Tiles(64, 256, 64, num_warps=8, num_stages=3),
    ("logits", True): Tiles(64, 64, 32, num_warps=8, num_stages=2),
    ("gemm", False): Tiles(128, 128, 64, num_warps=8, num_stages=3),
    ("gemm", True): Tiles(64, 64, 32, num_warps=4, num_stages=2),
}


def default_tiles(device: torch.device, dtype: torch.dtype, kind: str) -> Tiles:
    """Tiles for `kind` ("logits": the logprob kernels, "gemm": the LoRA product).

    The interpreter gets the smallest tiles `tl.dot` accepts. Both logprob kernels must use
    the same tiles: the backward relies on recomputing the forward's logits bit for bit.
    """
    if device.type != "cuda":
        return Tiles(16, 32, 16)
    return _GPU_TILES[(kind, dtype == torch.float32)]


Pair = tuple[torch.Tensor, torch.Tensor, int, int, int, int, int]


def pair_args(a: torch.Tensor, b_kn: torch.Tensor) -> Pair:
    """`dual_dot` arguments for one pair: `a` [M, K] and `b_kn` viewed as [K, N] (any strides)."""
    return (a, b_kn, a.shape[1], a.stride(0), a.stride(1), b_kn.stride(0), b_kn.stride(1))


def dot_constexprs(tiles: Tiles, first: torch.dtype, second: torch.dtype,
                   rank: int) -> dict[str, object]:
    """`dual_dot`'s constexprs for a pair of `first` operands and a rank-`rank` pair of `second`.

    fp32 operands: "tf32x3" on the GPU (three TF32 tensor-core products, about fp32
    accuracy: each product errs by ~2⁻²²), IEEE under the interpreter; other dtypes multiply
    exactly into fp32 anyway.
    """
    interpreting = triton_interpreting()

    def precision(dtype: torch.dtype) -> str:
        if dtype != torch.float32:
            return "tf32"  # ignored for bf16/fp16 operands
        return "ieee" if interpreting else "tf32x3"

    block_k2 = min(tiles.block_k, max(16, triton.next_power_of_2(max(rank, 1))))
    return {"BLOCK_M": tiles.block_m, "BLOCK_N": tiles.block_n, "BLOCK_K": tiles.block_k,
            "BLOCK_K2": block_k2, "UPCAST": interpreting, "PREC1": precision(first),
            "PREC2": precision(second), "num_warps": tiles.num_warps,
            "num_stages": tiles.num_stages}
