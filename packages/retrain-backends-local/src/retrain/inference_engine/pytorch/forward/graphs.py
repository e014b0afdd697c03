"""CUDA graphs of the lean forward's decoding step, one per batch size.

A step of a small model on a GPU is launch-bound: hundreds of kernels that each finish
faster than Python can issue the next. Captured once per batch size, a step is one replay.
The first call at a size runs the step eagerly (its result is the step's) and then
captures (which records and does not compute); before the first capture of a call, a warm-up
on a side stream, as CUDA's capture requires. Every graph of a sampling call shares one
memory pool: sizes only shrink during a call (rows are compacted, never added), so a graph
is never replayed after a later one was captured.

A capture that fails (an op that synchronises, an old driver) leaves the call on the eager
step with the reason kept for the metrics; sampling is correct either way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

log = logging.getLogger(__name__)


class StepGraphs:
    def __init__(self, step: Callable[[int], torch.Tensor]) -> None:
        self.step = step
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool: Any = None
        self.failed: str | None = None
        self.captures = 0
        self.replays = 0

    def __call__(self, n: int) -> torch.Tensor:
        entry = self.graphs.get(n)
        if entry is not None:
            entry[0].replay()
            self.replays += 1
            return entry[1]
        out = self.step(n)
        if self.failed is None:
            try:
                self._capture(n)
            except Exception as exc:  # any capture failure leaves the eager step, which is exact
                self.failed = f"{type(exc).__name__}: {exc}"[:300]
                log.warning("CUDA graph capture failed, sampling continues without graphs: %s", self.failed)
        return out

    def _capture(self, n: int) -> None:
        if not self.graphs:  # lazily made state (cuBLAS handles, workspaces) exists before the first capture
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.step(n)
            torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # autocast's cast cache would hand the graph tensors freed when autocast exits
        autocast = torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"),
                                  enabled=torch.is_autocast_enabled("cuda"), cache_enabled=False)
        with autocast, torch.cuda.graph(graph, pool=self.pool):
            out = self.step(n)
        self.pool = graph.pool()
        self.graphs[n] = (graph, out)
        self.captures += 1
