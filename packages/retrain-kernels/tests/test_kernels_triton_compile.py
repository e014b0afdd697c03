"""The Triton kernels compile for Hopper (sm_90) with Triton's own compiler and ptxas, on a CPU.

Triton's interpreter runs kernels with numpy and accepts what the GPU compiler rejects (a
non-constexpr global, mismatched dot operands, a tile that needs more shared memory than the
chip has). Compiling ahead of time for a GPU target catches those without a GPU; how fast the
kernels run is for the GPU benchmark to say.
"""

from __future__ import annotations

import os

import pytest
import torch

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                reason="this session defines the kernels for the interpreter")

HOPPER_SHARED_MEMORY = 227 * 1024  # bytes per block on H100/H200
NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def _compile(kernel, pointers: dict[str, str], constexprs: dict[str, object]):
    triton = pytest.importorskip("triton")
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError:
        pytest.skip("this triton has no ahead-of-time compile API")
    options = {k: constexprs.pop(k) for k in ("num_warps", "num_stages")}
    names = list(kernel.arg_names)
    signature = {
        name: "constexpr" if name in constexprs
        else pointers[name] if name.endswith("_ptr")
        else "fp32" if name == "inv_t"
        else "i32"
        for name in names
    }
    source = ASTSource(fn=kernel, signature=signature,
                       constexprs={(names.index(k),): v for k, v in constexprs.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    assert compiled.metadata.shared <= HOPPER_SHARED_MEMORY
    return compiled


def _pairs(first: torch.dtype, second: torch.dtype) -> dict[str, str]:
    a, b = "*" + NAMES[first], "*" + NAMES[second]
    return {"a1_ptr": a, "b1_ptr": a, "a2_ptr": b, "b2_ptr": b, "bias_ptr": a}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("variant", ["plain", "lora+bias+entropy+floor"])
def test_logprob_kernels_compile_for_hopper(dtype, variant):
    from retrain.kernels.triton import logprobs
    from retrain.kernels.triton.tile import default_tiles, dot_constexprs

    full = variant != "plain"
    tiles = default_tiles(torch.device("cuda"), dtype, "logits")
    flags = {"HAS_SECOND": full, "HAS_BIAS": full, "HAS_FLOOR": full}  # full: a sampler's truncation too
    stats = {f"{n}_ptr": "*fp32" for n in ("mx", "se", "sz", "zt", "top", "lognorm", "ez",
                                            "glp", "gent", "floor")}
    pointers = {**_pairs(dtype, dtype), **stats, "tgt_ptr": "*i64", "dr_ptr": "*" + NAMES[dtype]}
    _compile(logprobs._stats_kernel, pointers,
             {**flags, "WANT_ENTROPY": full, **dot_constexprs(tiles, dtype, dtype, 16)})
    _compile(logprobs._logit_grad_kernel, pointers,
             {**flags, "ENTROPY_GRAD": full, **dot_constexprs(tiles, dtype, dtype, 16)})


@pytest.mark.parametrize(("dtype", "adapter"), [(torch.bfloat16, torch.float32),
                                                (torch.bfloat16, torch.bfloat16),
                                                (torch.float32, torch.float32)], ids=str)
def test_lora_kernel_compiles_for_hopper(dtype, adapter):
    from retrain.kernels.triton import lora
    from retrain.kernels.triton.tile import default_tiles, dot_constexprs

    tiles = default_tiles(torch.device("cuda"), dtype, "gemm")
    pointers = {**_pairs(dtype, adapter), "c_ptr": "*" + NAMES[dtype]}
    _compile(lora._dual_matmul_kernel, pointers,
             {"HAS_BIAS": True, "GROUP_M": 8, **dot_constexprs(tiles, dtype, adapter, 16)})
