"""skyrl-tx 0.3.0's training/sampling engine, with its loss reduction made Tinker's, and its shapes fixed.

Tinker documents its RL and cross-entropy losses as sums over every token of every datum of
a `forward_backward` (retrain folds its own normalisation into the advantages on that basis).
skyrl-tx 0.3.0 instead divides each datum's summed loss by its summed weights and the
accumulated gradient by the number of datums. Two patches, applied before the engine builds
(and JIT-compiles) its functions, undo both divisions exactly: every per-token loss is
multiplied by its datum's summed weights, and the gradient mean becomes a sum. A third pads
every sequence of up to 128 tokens to 128, where skyrl-tx bins the longest of whatever batch
is pending (so that, with one sequence per batch as server.py configures, no shape depends on
what else was pending).

Run by the API process (api.py) in place of `uv run -m tx.tinker.engine`, with its arguments.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import standins

standins.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from tx.tinker import loss_fns  # noqa: E402
from tx.tinker.backends import jax as jax_backend  # noqa: E402
from tx.utils import models  # noqa: E402


def _summed(fn):  # type: ignore[no-untyped-def]
    def loss(target_logprobs, loss_mask, sampling_logprobs, advantages):  # type: ignore[no-untyped-def]
        return fn(target_logprobs, loss_mask, sampling_logprobs, advantages) * jnp.maximum(loss_mask.sum(), 1e-9)

    return loss


# the backend indexes this very list (jax.lax.switch); replace its members in place
loss_fns.LOSS_FUNCTIONS[:] = [_summed(f) for f in loss_fns.LOSS_FUNCTIONS]


def _gradient_sum(self, adapter_index: jax.Array):  # type: ignore[no-untyped-def]
    return jax.tree.map(lambda g: jnp.zeros_like(g).at[adapter_index].set(g[adapter_index]), self.grad_sum)


jax_backend.AccumulatedGradients.get_mean = _gradient_sum  # type: ignore[method-assign]

FIXED_LEN = 128
jax_backend.round_up_seq_len = lambda n: max(FIXED_LEN, models.round_up_seq_len(n))

if __name__ == "__main__":
    from tx.tinker.engine import main

    main()
