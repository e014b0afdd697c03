"""Matrix products with fp32 results for any floating input dtype.

Both kernel families promise fp32 accumulation for bf16/fp16 operands. On CUDA a bf16 GEMM
can write fp32 directly (`out_dtype`), so no operand is ever up-cast; elsewhere (CPU, or an
older torch) the operands are up-cast, which is exact because bf16/fp16 → fp32 is lossless.
"""

from __future__ import annotations

from functools import cache

import torch

F32 = torch.float32


@cache
def _cuda_out_dtype_mm() -> bool:
    """`torch.mm(a, b, out_dtype=float32)` works for bf16 CUDA operands (probed once)."""
    try:
        a = torch.ones(2, 2, device="cuda", dtype=torch.bfloat16)
        return torch.mm(a, a, out_dtype=F32).dtype == F32
    except (RuntimeError, TypeError):
        return False


def emits_f32(x: torch.Tensor) -> bool:
    """`mm_f32` on operands like `x` needs no up-cast copy of them."""
    return x.dtype == F32 or (x.is_cuda and _cuda_out_dtype_mm())


def mm_f32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` as fp32; equal to the product of the fp32 up-casts up to summation order."""
    if a.dtype == F32 and b.dtype == F32:
        return a @ b
    if a.is_cuda and a.dtype == b.dtype and _cuda_out_dtype_mm():
        return torch.mm(a, b, out_dtype=F32)
    return a.to(F32) @ b.to(F32)


def mm_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """`out[:] = a @ b` through fp32, cast once to out's dtype; no temporary when all fp32."""
    if a.dtype == F32 and b.dtype == F32 and out.dtype == F32 and out.is_contiguous():
        torch.mm(a, b, out=out)
    else:
        out.copy_(mm_f32(a, b))


def mm_f32_acc(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """`acc += a @ b` for an fp32 accumulator `acc`."""
    if a.dtype == F32 and b.dtype == F32:
        acc.addmm_(a, b)
    else:
        acc += mm_f32(a, b)
