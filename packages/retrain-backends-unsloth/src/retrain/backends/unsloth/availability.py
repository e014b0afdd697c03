"""Whether the unsloth backend can run here: Unsloth installed and a CUDA device torch sees.
`problem()` imports torch but never unsloth (whose import patches transformers and prints)."""

from __future__ import annotations

from importlib.util import find_spec

NEEDS_CUDA = ("the unsloth backend needs a CUDA GPU and torch sees none here "
              '(backend = "local" trains on the CPU)')


def problem() -> str | None:
    """One line saying why the backend cannot run here, or None."""
    if find_spec("unsloth") is None:
        return "unsloth is not installed (pip install retrain-backends-unsloth)"
    import torch

    if not torch.cuda.is_available():
        return NEEDS_CUDA
    return None
