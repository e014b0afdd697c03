"""Selected-token logprobs as one `torch.compile`d graph: h Wᵀ (+ b), scaled, truncated by a
floor where given, log-softmax at the target (the local backend's `train_compile_selective_ce`).

The graph is compiled for dynamic row counts, once per (bias, floor) combination and backend,
and autograd runs through it. Unlike `retrain.kernels.logprobs` it keeps the [N, V] logits for
the backward (the compiler decides what to save): more memory, fewer passes. Results are fp32.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import torch

from retrain.kernels.matmul import F32


def _selected(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, t: torch.Tensor, inv_t: float,
              floor: torch.Tensor | None) -> torch.Tensor:
    z = (h @ w.t()).to(F32)
    if b is not None:
        z = z + b.to(F32)
    z = z * inv_t
    if floor is not None:
        keep = (z >= floor[:, None]) | (torch.arange(z.shape[1], device=z.device)[None, :] == t[:, None])
        z = torch.where(keep, z, torch.full_like(z, float("-inf")))
    return z.gather(1, t[:, None]).squeeze(1) - torch.logsumexp(z, dim=1)


@cache
def _compiled(backend: str) -> Callable[..., torch.Tensor]:
    compiled: Callable[..., torch.Tensor] = torch.compile(_selected, backend=backend, dynamic=True, fullgraph=True)
    return compiled


def compiled_selected_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                               bias: torch.Tensor | None = None, temperature: float = 1.0,
                               floor: torch.Tensor | None = None, backend: str = "inductor") -> torch.Tensor:
    """[N] logprobs of `targets` [N] under hidden [N, H] · weight [V, H]ᵀ (+ bias) / temperature,
    over each row's logits at or above `floor` [N] and its target (all of them without)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    run = _compiled(backend)
    return run(hidden, weight, bias, targets, 1.0 / temperature, floor.to(F32) if floor is not None else None)
