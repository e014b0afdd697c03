"""Shared inputs and tolerances for the kernels tests (torch paths and the Triton interpreter).

Test modules reach the helpers through the fixtures `make_head`, `check_head` and
`assert_near` (pytest's importlib mode does not let them import this file).

Tolerances (also in docs/kernels.md), as max |actual − reference| ≤ tol · max(1, max |reference|):
- logprobs and entropies: 5e-5 for every input dtype, because everything after the product is
  fp32 and the product of bf16/fp16 values accumulates in fp32: only summation order differs;
- gradients: 1e-5 for fp32 inputs; 2e-2 (bf16) and 5e-3 (fp16) for low-precision inputs,
  whose gradients are returned in the input dtype (and on the Triton path pass through one
  rounding of the logit gradient to the input dtype before the GEMMs).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from retrain.kernels import accelerators

# The Triton-interpreter tests run in a child process that sets TRITON_INTERPRET=1
# (test_kernels_triton.py); a session without it does not collect them at all.
collect_ignore_glob = [] if os.environ.get("TRITON_INTERPRET") == "1" else ["interpreter/*"]

VALUE_TOL = 5e-5
GRAD_TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 5e-3}


def assert_near(actual: torch.Tensor, expected: torch.Tensor, tol: float, what: str) -> None:
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    diff = (actual.double() - expected.double()).abs().max().item() if actual.numel() else 0.0
    scale = max(1.0, expected.double().abs().max().item() if expected.numel() else 0.0)
    assert diff <= tol * scale, f"{what}: max|Δ| = {diff:.3g} > {tol:g} · {scale:.3g}"


@dataclass
class Head:
    """An LM-head problem: low-precision leaves for the kernel, fp32 leaves for the reference."""

    h: torch.Tensor
    w: torch.Tensor
    b: torch.Tensor | None
    t: torch.Tensor
    ref: dict[str, torch.Tensor]  # fp32 copies of h, w (, b) as independent leaves

    def grads(self) -> dict[str, torch.Tensor | None]:
        out = {"h": self.h.grad, "w": self.w.grad}
        if self.b is not None:
            out["b"] = self.b.grad
        return out


def make_head(
    n: int, v: int, hdim: int, *, dtype: torch.dtype = torch.float32, bias: bool = True,
    masked: tuple[int, ...] = (), train_head: bool = True, scale: float = 1.0, seed: int = 0,
) -> Head:
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(n, hdim, generator=gen)
    w = torch.randn(v, hdim, generator=gen) * (scale / hdim**0.5)
    b = torch.randn(v, generator=gen) * 0.5 if bias else None
    t = torch.randint(0, v, (n,), generator=gen)
    t[list(masked)] = -100
    low = [x.to(dtype) for x in (h, w)] + ([b.to(dtype)] if b is not None else [])
    h_k, w_k = low[0].requires_grad_(), low[1].requires_grad_(train_head)
    b_k = low[2].requires_grad_(train_head) if b is not None else None
    ref = {"h": h_k.detach().float().requires_grad_(), "w": w_k.detach().float().requires_grad_()}
    if b_k is not None:
        ref["b"] = b_k.detach().float().requires_grad_()
    return Head(h_k, w_k, b_k, t, ref)


def check_against_reference(
    head: Head, run: Callable[[Head], tuple[torch.Tensor, torch.Tensor]], *,
    temperature: float = 1.0, entropy: bool = True, seed: int = 1,
) -> None:
    """Values and gradients of `run(head)` = (logprobs, entropies) against the naive reference."""
    from retrain.kernels.logprobs import reference_selected_logprobs

    lp, ent = run(head)
    assert lp.dtype == torch.float32 and ent.dtype == torch.float32
    gen = torch.Generator().manual_seed(seed)
    g_lp, g_ent = torch.randn(lp.shape, generator=gen), torch.randn(lp.shape, generator=gen)
    (lp * g_lp + (ent * g_ent if entropy else 0)).sum().backward()

    r = head.ref
    ref_lp, ref_ent = reference_selected_logprobs(
        r["h"], r["w"], head.t, bias=r.get("b"), temperature=temperature, return_entropy=True)
    (ref_lp * g_lp + (ref_ent * g_ent if entropy else 0)).sum().backward()

    assert_near(lp, ref_lp, VALUE_TOL, "logprobs")
    assert_near(ent, ref_ent, VALUE_TOL, "entropies")
    tol = GRAD_TOL[head.h.dtype]
    for name, grad in head.grads().items():
        param = {"h": head.h, "w": head.w, "b": head.b}[name]
        if param is None or not param.requires_grad:
            assert grad is None, name
            continue
        assert grad is not None and grad.dtype == param.dtype, name
        assert_near(grad, r[name].grad, tol, f"grad {name}")  # type: ignore[arg-type]
    masked = head.t == -100
    if masked.any():
        assert (lp[masked] == 0).all() and (ent[masked] == 0).all()
        assert head.h.grad is not None and (head.h.grad[masked] == 0).all()


@pytest.fixture(name="make_head")
def _make_head_fixture() -> Callable[..., Head]:
    return make_head


@pytest.fixture(name="check_head")
def _check_head_fixture() -> Callable[..., None]:
    return check_against_reference


@pytest.fixture(name="assert_near")
def _assert_near_fixture() -> Callable[[torch.Tensor, torch.Tensor, float, str], None]:
    return assert_near


@pytest.fixture(autouse=True)
def _fresh_kernel_state() -> None:
    """Every test starts in mode `auto` with empty path counters."""
    accelerators.set_kernel_mode("auto")
    accelerators.reset_kernel_metrics()
