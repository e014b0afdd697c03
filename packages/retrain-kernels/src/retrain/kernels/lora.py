"""Fused LoRA linear `y = x Wᵀ + b + s·(x Aᵀ) Bᵀ`, forward and backward, and its peft hook.

Numerics follow peft's LoRA Linear: the rank-r branch runs in the adapter's dtype (x is cast
to A's dtype, as peft does), products accumulate in fp32 and the output is rounded once to
x's dtype (peft rounds the base output first, so bf16 results may differ by one rounding).

Memory: the backward keeps x (already alive for the base layer) and the rank-r `s·x Aᵀ`,
never an [M, out] intermediate. Gradients reach x, A, B, and W or b when they require grad;
with `detach_input` the LoRA branch sends x no gradient (x's gradient is the base layer's
alone), the `lora_detach_input` option (`detach_lora_input` marks a model's layers).

`patch_peft_lora` swaps the forward of every peft `lora.Linear` over an `nn.Linear`; a call
that the fused form cannot reproduce exactly (dropout active, several or no active adapters,
DoRA and other variants, merged or disabled adapters, autocast, extra arguments) runs
peft's own forward instead and is counted as path `peft`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

import torch
from torch import nn

from retrain.kernels.accelerators import choose_path, record
from retrain.kernels.lora_head import LoRAHead
from retrain.kernels.matmul import F32, mm_f32, mm_f32_acc

_ORIGINAL = "_retrain_peft_forward"
_DETACH = "_retrain_detach_lora_input"
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def lora_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    scaling: float,
    bias: torch.Tensor | None = None,
    *,
    path: str | None = None,
    detach_input: bool = False,
) -> torch.Tensor:
    """x [..., K], weight [O, K], lora_a [r, K], lora_b [O, r] → [..., O] in x's dtype."""
    x2 = x.reshape(-1, x.shape[-1])
    if weight.shape[1] != x2.shape[1] or lora_a.shape[1] != x2.shape[1]:
        raise ValueError(f"in-features: x {x2.shape[1]}, W {weight.shape[1]}, A {lora_a.shape[1]}")
    if lora_b.shape != (weight.shape[0], lora_a.shape[0]):
        raise ValueError(f"B shape {tuple(lora_b.shape)} != ({weight.shape[0]}, {lora_a.shape[0]})")
    chosen = choose_path([x2, weight, lora_a, lora_b], path=path,
                         unsupported=_triton_unsupported(x2, weight, lora_a, lora_b))
    record("lora", chosen)
    impl = _triton_dual if chosen == "triton" else _torch_dual
    y = _LoRALinear.apply(x2, weight, bias, lora_a, lora_b, float(scaling), impl, detach_input)
    return y.reshape(*x.shape[:-1], weight.shape[0])


def reference_lora_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    scaling: float,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """The unfused definition, with plain autograd."""
    base = nn.functional.linear(x, weight, bias)
    low = nn.functional.linear(nn.functional.linear(x.to(lora_a.dtype), lora_a), lora_b)
    return (base + low * scaling).to(x.dtype)


def _triton_unsupported(x: torch.Tensor, w: torch.Tensor, a: torch.Tensor,
                        b: torch.Tensor) -> str | None:
    if x.shape[0] == 0:
        return "no rows"
    if x.dtype not in _FLOATS or x.dtype != w.dtype:
        return f"x {x.dtype} / W {w.dtype} (need one of fp32, bf16, fp16, equal)"
    if a.dtype not in _FLOATS or a.dtype != b.dtype:
        return f"A {a.dtype} / B {b.dtype} (need one of fp32, bf16, fp16, equal)"
    return None


class _Dual(Protocol):
    def __call__(self, a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor,
                 bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor: ...


def _torch_dual(a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor,
                bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    acc = mm_f32(a1, b1)
    mm_f32_acc(acc, a2, b2)
    if bias is not None:
        acc += bias.to(F32)
    return acc.to(out_dtype)


def _triton_dual(a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor,
                 bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    from retrain.kernels.triton.lora import dual_matmul

    return dual_matmul(a1, b1, a2, b2, bias, out_dtype)


class _LoRALinear(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
        a: torch.Tensor, b: torch.Tensor, scaling: float, dual: _Dual, detach_input: bool,
    ) -> torch.Tensor:
        xa = mm_f32(x.to(a.dtype), a.t()).mul_(scaling).to(b.dtype)  # s·x Aᵀ, [M, r]
        y = dual(x, w.t(), xa, b.t(), bias, x.dtype)
        ctx.save_for_backward(x, w, bias, a, b, xa)
        ctx.scaling = scaling  # type: ignore[attr-defined]
        ctx.dual = dual  # type: ignore[attr-defined]
        ctx.detach_input = detach_input  # type: ignore[attr-defined]
        return y

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, g: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        x, w, bias, a, b, xa = ctx.saved_tensors  # type: ignore[attr-defined]
        needs = ctx.needs_input_grad  # type: ignore[attr-defined]
        need_x, need_w, need_bias, need_a, need_b = needs[:5]
        scaling: float = ctx.scaling  # type: ignore[attr-defined]
        g = g.contiguous()
        detach: bool = ctx.detach_input  # type: ignore[attr-defined]
        gb = None
        if (need_x and not detach) or need_a:
            gb = mm_f32(g, b).mul_(scaling).to(a.dtype)  # s·g B, [M, r]
        dual: _Dual = ctx.dual  # type: ignore[attr-defined]
        grad_x = None
        if need_x:
            grad_x = mm_f32(g, w).to(x.dtype) if detach else dual(g, w, gb, a, None, x.dtype)
        grad_a = mm_f32(gb.t(), x).to(a.dtype) if need_a and gb is not None else None
        grad_b = mm_f32(g.t(), xa).to(b.dtype) if need_b else None
        grad_w = mm_f32(g.t(), x).to(w.dtype) if need_w else None
        grad_bias = None
        if need_bias and bias is not None:
            grad_bias = g.sum(dim=0, dtype=F32).to(bias.dtype)
        return grad_x, grad_w, grad_bias, grad_a, grad_b, None, None, None


# -- peft -------------------------------------------------------------------------------------


def _lora_parts(module: nn.Module) -> tuple[str, nn.Linear, nn.Linear, nn.Linear] | None:
    """(adapter, base, lora_A, lora_B) when exactly one plain LoRA adapter is live, else None."""
    if getattr(module, "disable_adapters", True) or getattr(module, "merged", True):
        return None
    active = list(getattr(module, "active_adapters", ()))
    if len(active) != 1 or active[0] not in module.lora_A:
        return None
    name = active[0]
    if name in getattr(module, "lora_variant", {}) or getattr(module, "use_dora", {}).get(name):
        return None
    if getattr(module, "fan_in_fan_out", False):
        return None
    base = module.get_base_layer()
    lora_a, lora_b = module.lora_A[name], module.lora_B[name]
    if type(base) is not nn.Linear or lora_a.bias is not None or lora_b.bias is not None:
        return None
    return name, base, lora_a, lora_b


def _dropout_active(dropout: nn.Module) -> bool:
    if isinstance(dropout, nn.Identity):
        return False
    return not (isinstance(dropout, nn.Dropout) and (dropout.p == 0 or not dropout.training))


def _fused_forward(module: nn.Module, original: Callable[..., torch.Tensor], path: str | None,
                   x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
    parts = None if args or kwargs else _lora_parts(module)
    if (
        parts is None
        or _dropout_active(module.lora_dropout[parts[0]])
        or not getattr(module, "cast_input_dtype_enabled", True)
        or x.dtype != parts[1].weight.dtype
        or torch.is_autocast_enabled(x.device.type)
    ):
        record("lora", "peft")
        return original(x, *args, **kwargs)
    name, base, lora_a, lora_b = parts
    return lora_linear(x, base.weight, lora_a.weight, lora_b.weight, module.scaling[name],
                       base.bias, path=path, detach_input=getattr(module, _DETACH, False))


def detach_lora_input(model: nn.Module) -> int:
    """The LoRA branch of every peft `lora.Linear` stops sending its input a gradient: the
    fused forward reads the mark, peft's own forward gets a pre-hook on each `lora_A` that
    detaches what it is given, and an LM head's delta detaches `h`. The base path's gradient
    is untouched. Idempotent; returns how many layers were newly marked."""
    from peft.tuners.lora.layer import Linear as LoraLinear

    marked = 0
    for module in model.modules():
        if not isinstance(module, LoraLinear) or getattr(module, _DETACH, False):
            continue
        setattr(module, _DETACH, True)
        for lora_a in module.lora_A.values():
            lora_a.register_forward_pre_hook(_detach_first)
        marked += 1
    return marked


def _detach_first(_module: nn.Module, args: tuple[object, ...]) -> tuple[object, ...]:
    first = args[0]
    return (first.detach(), *args[1:]) if isinstance(first, torch.Tensor) else args


def _detached(dropout: Callable[[torch.Tensor], torch.Tensor], h: torch.Tensor) -> torch.Tensor:
    return dropout(h.detach())


def patch_peft_lora(model: nn.Module, *, path: str | None = None) -> int:
    """Route every peft `lora.Linear` over an `nn.Linear` through `lora_linear`.

    Idempotent; returns how many layers were newly patched. `path` pins `auto|triton|torch`
    for these layers, else the installed kernels mode decides per call.
    """
    from peft.tuners.lora.layer import Linear as LoraLinear

    patched = 0
    for module in model.modules():
        if not isinstance(module, LoraLinear) or hasattr(module, _ORIGINAL):
            continue
        if type(module.get_base_layer()) is not nn.Linear:
            continue
        original = module.forward
        setattr(module, _ORIGINAL, original)
        module.forward = functools.partial(_fused_forward, module, original, path)
        patched += 1
    return patched


def unpatch_peft_lora(model: nn.Module) -> int:
    """Undo `patch_peft_lora`; returns how many layers were restored."""
    restored = 0
    for module in model.modules():
        if hasattr(module, _ORIGINAL):
            delattr(module, _ORIGINAL)
            del module.forward
            restored += 1
    return restored


def lm_head_operands(
    head: nn.Module,
) -> tuple[torch.Tensor, torch.Tensor | None, LoRAHead | None] | None:
    """(weight, bias, LoRA delta) of an LM head for `selected_logprobs`, or None.

    A plain `nn.Linear` gives no delta; a peft `lora.Linear` whose adapter is live gives its
    base weight and a `LoRAHead` (dropout included: the rank-r branch runs in autograd);
    merged or disabled adapters give the base layer alone. None means "cannot express this
    head" (DoRA, several adapters, quantised base): compute full logits instead.
    """
    if type(head) is nn.Linear:
        return head.weight, head.bias, None
    if not hasattr(head, "lora_A") or not hasattr(head, "get_base_layer"):
        return None
    base = head.get_base_layer()
    if type(base) is not nn.Linear:
        return None
    if getattr(head, "disable_adapters", False) or getattr(head, "merged", False):
        return base.weight, base.bias, None
    parts = _lora_parts(head)
    if parts is None:
        return None
    name, _, lora_a, lora_b = parts
    dropout = head.lora_dropout[name]
    if getattr(head, _DETACH, False):
        dropout = functools.partial(_detached, dropout)
    delta = LoRAHead(lora_a.weight, lora_b.weight, head.scaling[name], dropout)
    return base.weight, base.bias, delta
