"""The sampler's gap on a step sampled ahead (`max_async_level > 0`): the engine's own, and the
policy's drift.

`engine/logprob_gap_max` and `_mean` (retrain.backends.local.mismatch) compare the sampler's
logprobs with the trainer's; on tokens sampled from older weights the trainer's current ones
differ by the updates since, so there the gap is not the engine's. On a step whose datums were
sampled from older weights it is reported as `async/stale_logprob_gap_max` and `_mean` (drift
and engine together), and, with `[inference] recompute_stale_logprobs`, the engine's own gap
is measured by recomputing each datum's logprobs under the version that sampled it (one
forward without gradient per version in the step) and reported as `engine/logprob_gap_*`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from retrain.backends.local.versions import VersionStore, swapped
from retrain.types import Datum

GAP_KEYS = ("engine/logprob_gap_max", "engine/logprob_gap_mean")
#: (logprobs the trainer computes for the datums' sampled tokens, the sampler's), flat
Recompute = Callable[[Sequence[Datum]], tuple[torch.Tensor, torch.Tensor]]


class StaleGap:
    def __init__(self, store: VersionStore | None, recompute: bool) -> None:
        self.store = store
        self.recompute = recompute and store is not None
        self.current = 0  # the version the trained weights are, as last published

    def metrics(self, datums: Sequence[Datum], mismatch: dict[str, float], model: torch.nn.Module,
                logprobs: Recompute) -> dict[str, float]:
        """The step's mismatch metrics, relabelled and completed when its datums are stale."""
        stale = [d for d in datums if d.policy_version < self.current]
        if not stale:
            return mismatch
        out = {k: v for k, v in mismatch.items() if k not in GAP_KEYS}
        out["async/stale_logprob_gap_max"] = mismatch["engine/logprob_gap_max"]
        out["async/stale_logprob_gap_mean"] = mismatch["engine/logprob_gap_mean"]
        if self.recompute and self.store is not None:
            out.update(self._engine_gap(datums, model, logprobs))
        return out

    def _engine_gap(self, datums: Sequence[Datum], model: torch.nn.Module, logprobs: Recompute) -> dict[str, float]:
        assert self.store is not None
        total, count, worst = 0.0, 0, 0.0
        for version in sorted({d.policy_version for d in datums}):
            group = [d for d in datums if d.policy_version == version]
            if version == self.current:
                new, old = logprobs(group)
            else:
                with swapped(model, self.store.get(version)):
                    new, old = logprobs(group)
            gap = (new - old).abs()
            if gap.numel():
                total, count, worst = total + float(gap.sum()), count + gap.numel(), max(worst, float(gap.max()))
        return {"engine/logprob_gap_max": round(worst, 6), "engine/logprob_gap_mean": round(total / max(count, 1), 6)}
