"""Which implementation runs a kernel call: Triton or torch, and a record of the choices.

Contract with the local backend:

- the `[backend.options] kernels` value (`auto`, `triton`, `torch`) is installed once with
  `set_kernel_mode` (or scoped with `kernel_mode`); a call may still pass its own `path=`;
- `auto` takes Triton only for CUDA tensors, when `triton` imports and the kernel supports the
  shape; everything else takes the exact torch path;
- `triton` forces Triton and raises instead of silently degrading. CPU tensors are accepted
  only under `TRITON_INTERPRET=1` (Triton's numpy interpreter, used by the tests);
- every call records the path it took; `kernel_metrics()` turns the record into the keys a
  metrics row carries (`kernels/logprob_path`, `kernels/lora_path`, per-path call counts).

No torch or triton import happens at module import time.
"""

from __future__ import annotations

import importlib.util
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Literal

from retrain.errors import UserError

if TYPE_CHECKING:
    import torch

Mode = Literal["auto", "triton", "torch"]
Path = Literal["triton", "torch"]
MODES: tuple[Mode, ...] = ("auto", "triton", "torch")

# Kernel families that report a path; each gets `kernels/<op>_path` in the metrics.
OPS: tuple[str, ...] = ("logprob", "lora")

_mode: Mode = "auto"
_calls: dict[str, Counter[str]] = {op: Counter() for op in OPS}


class KernelUnavailableError(UserError, RuntimeError):
    """The Triton path was forced but cannot run for this call."""


def _checked(mode: str) -> Mode:
    if mode not in MODES:
        raise ValueError(f"kernels mode must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def set_kernel_mode(mode: str) -> None:
    """Install the process-wide default (the local backend's `kernels` option)."""
    global _mode
    _mode = _checked(mode)


def get_kernel_mode() -> Mode:
    return _mode


@contextmanager
def kernel_mode(mode: str) -> Iterator[None]:
    """Scope a default mode; restores the previous one on exit."""
    previous = get_kernel_mode()
    set_kernel_mode(mode)
    try:
        yield
    finally:
        set_kernel_mode(previous)


@cache
def triton_available() -> bool:
    """`triton` is installed and importable (probed once, without compiling anything)."""
    if importlib.util.find_spec("triton") is None:
        return False
    try:
        import triton  # noqa: F401
    except Exception:  # a broken install is "not available", never a crash
        return False
    return True


def triton_interpreting() -> bool:
    """Triton kernels will run in the numpy interpreter (decided when they are defined)."""
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def choose_path(
    tensors: Sequence[torch.Tensor],
    *,
    path: str | None = None,
    unsupported: str | None = None,
) -> Path:
    """The implementation for one call.

    `tensors` are the call's operands (their devices decide); `unsupported` is the kernel's own
    reason to decline the shape or dtypes, or None; `path` overrides the installed mode.
    """
    mode = _checked(path) if path is not None else _mode
    if mode == "torch":
        return "torch"
    on_cuda = all(t.is_cuda for t in tensors)
    if mode == "auto":
        ok = on_cuda and unsupported is None and triton_available()
        return "triton" if ok else "torch"
    if not triton_available():
        raise KernelUnavailableError("kernels=triton but triton does not import")
    if unsupported is not None:
        raise KernelUnavailableError(f"kernels=triton but the call is unsupported: {unsupported}")
    if not on_cuda and not triton_interpreting():
        raise KernelUnavailableError(
            "kernels=triton needs CUDA tensors (or TRITON_INTERPRET=1 for the CPU interpreter)"
        )
    return "triton"


def record(op: str, path: str) -> None:
    """Count one call of kernel family `op` (one of OPS) that ran on `path`."""
    _calls[op][path] += 1


def kernel_metrics(*, reset: bool = False) -> dict[str, str | int]:
    """Metrics-row keys for the calls recorded since the last reset.

    `kernels/<op>_path` is the path every call took, `mixed` when calls differed, `none` when
    there were none; `kernels/<op>_<path>_calls` count calls per path.
    """
    out: dict[str, str | int] = {
        "kernels/mode": _mode,
        "kernels/triton_available": int(triton_available()),
    }
    for op in OPS:
        counts = _calls[op]
        paths = sorted(p for p, n in counts.items() if n)
        out[f"kernels/{op}_path"] = paths[0] if len(paths) == 1 else ("mixed" if paths else "none")
        for p in paths:
            out[f"kernels/{op}_{p}_calls"] = counts[p]
    if reset:
        reset_kernel_metrics()
    return out


@contextmanager
def unrecorded() -> Iterator[None]:
    """Calls made inside are not counted: the record is restored on exit (evaluation sampling
    must not show up in a training step's metrics row)."""
    saved = {op: Counter(counts) for op, counts in _calls.items()}
    try:
        yield
    finally:
        for op, counts in saved.items():
            _calls[op] = counts


def reset_kernel_metrics() -> None:
    for counts in _calls.values():
        counts.clear()
