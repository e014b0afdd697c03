"""`[backend.options] strict_deterministic`: torch's deterministic algorithms for the whole
process, so a seeded run on CUDA repeats bit for bit (a seeded CPU run already does).

cuBLAS reads `CUBLAS_WORKSPACE_CONFIG` when CUDA starts, so `prepare` runs before the backend
touches CUDA; a process whose CUDA started without it is refused rather than left half
deterministic. An operation without a deterministic implementation then raises instead of
running (torch's `use_deterministic_algorithms(True)`, warn_only off): the run stops at the op
that would have broken reproducibility. The switch is process-wide, so a non-strict backend
after a strict one in the same process is refused too.
"""

from __future__ import annotations

import os

import torch

from retrain.errors import UserError

WORKSPACE_VAR = "CUBLAS_WORKSPACE_CONFIG"
WORKSPACES = (":4096:8", ":16:8")  # the two settings NVIDIA documents as deterministic
_established = False


def prepare() -> None:
    """Set cuBLAS's workspace before CUDA starts (`:4096:8` unless one of the deterministic two is set)."""
    current = os.environ.get(WORKSPACE_VAR, "")
    if current and current not in WORKSPACES:
        raise UserError(f"strict_deterministic needs {WORKSPACE_VAR} unset or one of {', '.join(WORKSPACES)}; "
                        f"it is {current!r}", hint=f"unset {WORKSPACE_VAR}")
    os.environ.setdefault(WORKSPACE_VAR, WORKSPACES[0])
    if torch.cuda.is_initialized() and not current and not _established:
        raise UserError("strict_deterministic: CUDA started in this process before cuBLAS's workspace was set",
                        hint=f"export {WORKSPACE_VAR}={WORKSPACES[0]} before starting, or run retrain in a fresh process")


def establish() -> None:
    """Deterministic algorithms on, cuDNN deterministic and not benchmarking; checked after."""
    global _established
    torch.use_deterministic_algorithms(True, warn_only=False)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    if not (torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic
            and not torch.backends.cudnn.benchmark):
        raise RuntimeError("strict_deterministic: torch did not keep its deterministic settings")
    _established = True


def refuse_after_strict() -> None:
    """A backend without strict mode in a process where one had it: torch's switch is global."""
    if _established:
        raise UserError("a backend without strict_deterministic cannot follow a strict one in the same process",
                        hint="set strict_deterministic alike for every run of this process")


def proof() -> dict[str, int | str]:
    """What the run actually ran under (runtime metrics)."""
    return {
        "local_strict_deterministic": int(_established),
        "local_torch_deterministic_algorithms": int(torch.are_deterministic_algorithms_enabled()),
        "local_cudnn_deterministic": int(bool(torch.backends.cudnn.deterministic)),
        "local_cudnn_benchmark": int(bool(torch.backends.cudnn.benchmark)),
        "local_cublas_workspace_config": os.environ.get(WORKSPACE_VAR, ""),
    }
