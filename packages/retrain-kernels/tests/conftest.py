"""Shared inputs, checks and tolerances for the kernels tests (torch paths and the interpreter).

Test modules reach the helpers through fixtures of the same names (pytest's importlib mode
does not let them import this file).

Tolerances (also in docs/kernels.md), as max |actual − reference| ≤ tol · max(1, max |reference|):
- logprobs and entropies: 5e-5 for every input dtype, because everything after the product is
  fp32 and the product of bf16/fp16 values accumulates in fp32: only summation order differs;
- gradients: 1e-5 for fp32 inputs; 2e-2 (bf16) and 5e-3 (fp16) for low-precision inputs,
  whose gradients are returned in the input dtype (and on the Triton path pass through one
  rounding of the logit gradient to the input dtype before the GEMMs);
- LoRA linear outputs and gradients: 1e-5 in fp32, 1e-2 in bf16 (one rounding to bf16).
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


def truncation_floors(head: Head, keep: int, temperature: float = 1.0) -> torch.Tensor:
    """Per row a floor (a sampler's truncation) halfway between its `keep`-th and next largest
    scaled logit, so the top `keep` ids stay; row 1 keeps everything (-inf) and row 2's floor
    sits above every logit, so its target alone stays."""
    r = head.ref
    with torch.no_grad():
        z = r["h"] @ r["w"].t() + r.get("b", 0.0)
        top = (z / temperature).sort(dim=1, descending=True).values
    floor = (top[:, keep - 1] + top[:, keep]) / 2
    floor[1] = float("-inf")
    floor[2] = top[2, 0] + 1.0
    return floor


def check_against_reference(
    head: Head, run: Callable[[Head], tuple[torch.Tensor, torch.Tensor]], *,
    temperature: float = 1.0, entropy: bool = True, seed: int = 1, floor: torch.Tensor | None = None,
) -> None:
    """Values and gradients of `run(head)` = (logprobs, entropies) against the naive reference
    (over each row's kept ids where `floor` truncates)."""
    from retrain.kernels.logprobs import reference_selected_logprobs

    lp, ent = run(head)
    assert lp.dtype == torch.float32 and ent.dtype == torch.float32
    gen = torch.Generator().manual_seed(seed)
    g_lp, g_ent = torch.randn(lp.shape, generator=gen), torch.randn(lp.shape, generator=gen)
    (lp * g_lp + (ent * g_ent if entropy else 0)).sum().backward()

    r = head.ref
    ref_lp, ref_ent = reference_selected_logprobs(
        r["h"], r["w"], head.t, bias=r.get("b"), temperature=temperature, return_entropy=True, floor=floor)
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


# -- LoRA ----------------------------------------------------------------------------------------

# LoRA outputs and gradients: one rounding to their dtype (relative to the largest value).
LORA_TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def lora_operands(m: int, k: int, o: int, r: int, x_dtype: torch.dtype, a_dtype: torch.dtype,
                  train_base: bool, seed: int = 0) -> list[torch.Tensor]:
    """x [3, m, k], W [o, k], b [o], A [r, k], B [o, r] (leaves) and an upstream gradient."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(3, m, k, generator=gen).to(x_dtype).requires_grad_()
    w = (torch.randn(o, k, generator=gen) / k**0.5).to(x_dtype).requires_grad_(train_base)
    b = torch.randn(o, generator=gen).to(x_dtype).requires_grad_(train_base)
    a = (torch.randn(r, k, generator=gen) / k**0.5).to(a_dtype).requires_grad_()
    bb = torch.randn(o, r, generator=gen).to(a_dtype).requires_grad_()
    g = torch.randn(3, m, o, generator=gen).to(x_dtype)
    return [x, w, b, a, bb, g]


def check_lora_linear(path: str, x_dtype: torch.dtype, a_dtype: torch.dtype, train_base: bool,
                      shape: tuple[int, int, int, int] = (13, 40, 50, 5)) -> None:
    """`lora_linear` on `path` against the unfused reference in fp32 on the same values."""
    from retrain.kernels.lora import lora_linear, reference_lora_linear

    m, k, o, r = shape
    x, w, b, a, bb, g = lora_operands(m, k, o, r, x_dtype, a_dtype, train_base)
    y = lora_linear(x, w, a, bb, 0.75, b, path=path)
    assert y.dtype == x_dtype and y.shape == (3, m, o)
    y.backward(g)
    leaves = [x, w, b, a, bb]
    refs = [t.detach().float().requires_grad_(t.requires_grad) for t in leaves]
    ref = reference_lora_linear(refs[0], refs[1], refs[3], refs[4], 0.75, refs[2])
    ref.backward(g.float())
    assert_near(y, ref, LORA_TOL[x_dtype], "output")
    for name, leaf, theirs in zip(["x", "W", "b", "A", "B"], leaves, refs, strict=True):
        if not leaf.requires_grad:
            assert leaf.grad is None, name
            continue
        assert leaf.grad is not None and leaf.grad.dtype == leaf.dtype, name
        assert theirs.grad is not None
        assert_near(leaf.grad, theirs.grad, LORA_TOL[leaf.dtype], f"grad {name}")


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def tiny_peft_model(dtype: torch.dtype = torch.float32, dropout: float = 0.0,
                    targets: list[str] | None = None, layers: int = 2) -> torch.nn.Module:
    """A random Qwen3-architecture model (built from a config, no download) with LoRA on it."""
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    base = transformers.Qwen3ForCausalLM(config).to(dtype)
    lora = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout,
                           target_modules=targets or LORA_TARGETS)
    model = peft.get_peft_model(base, lora)
    with torch.no_grad():  # peft starts B at zero; a random B makes the LoRA branch count
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    return model


def peft_step(model: torch.nn.Module, ids: torch.Tensor,
              ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits and parameter gradients of one forward + backward (dropout seeded)."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    logits = model(input_ids=ids).logits
    logits.float().logsumexp(-1).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


@pytest.fixture(name="make_head")
def _make_head_fixture() -> Callable[..., Head]:
    return make_head


@pytest.fixture(name="truncation_floors")
def _truncation_floors_fixture() -> Callable[..., torch.Tensor]:
    return truncation_floors


@pytest.fixture(name="check_head")
def _check_head_fixture() -> Callable[..., None]:
    return check_against_reference


@pytest.fixture(name="assert_near")
def _assert_near_fixture() -> Callable[[torch.Tensor, torch.Tensor, float, str], None]:
    return assert_near


@pytest.fixture(name="check_lora")
def _check_lora_fixture() -> Callable[..., None]:
    return check_lora_linear


@pytest.fixture(name="lora_operands")
def _lora_operands_fixture() -> Callable[..., list[torch.Tensor]]:
    return lora_operands


@pytest.fixture(name="tiny_peft_model")
def _tiny_peft_model_fixture() -> Callable[..., torch.nn.Module]:
    return tiny_peft_model


@pytest.fixture(name="peft_step")
def _peft_step_fixture() -> Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]:
    return peft_step


@pytest.fixture(autouse=True)
def _fresh_kernel_state() -> None:
    """Every test starts in mode `auto` with empty path counters."""
    accelerators.set_kernel_mode("auto")
    accelerators.reset_kernel_metrics()
