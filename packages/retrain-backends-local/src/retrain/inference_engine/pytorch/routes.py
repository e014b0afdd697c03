"""The expert ids a mixture-of-experts model chooses while it samples, for routing replay
(`[inference] routing_replay`: the trainer's forward then routes each token as the sampler did).

For one decoding call every router forward is wrapped (`retrain.models.routing.wrapped`) to
hand its ids [tokens, k] to a `RouteLog`, which keeps them one of two ways:

- listed, for a forward whose tokens are a grid [rows, columns] flattened row-major (the
  prompts' prefill, chunk after chunk; transformers' forward at every step): `grid` gives them
  back as [rows, columns, layers, k];
- into a fixed buffer [rows, layers, k], for retrain's decoder's steps: a copy into a buffer
  allocated once is what a CUDA graph of the step captures and replays (`forward.graphs`).

Ids are kept as int16 on the device (no sync per step) and leave it once, with the completions.
A layer without a router (a dense layer) keeps 0s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from retrain.models.routing import RouterOutput

IDS = torch.int16


class RouteLog:
    def __init__(self, layers: int, k: int, rows: int, device: torch.device) -> None:
        self.layers, self.k = layers, k
        self.listed: list[list[torch.Tensor]] = [[] for _ in range(layers)]
        self.buffer = torch.zeros((rows, layers, k), dtype=IDS, device=device)
        self.fixed = False  # ids go into `buffer` rather than the lists

    def put(self, layer: int, ids: torch.Tensor) -> None:
        if self.fixed:
            self.buffer[: ids.shape[0], layer].copy_(ids)
        else:
            self.listed[layer].append(ids.to(IDS))

    def wrap(self, layer: int, router: Any, own: Callable[[torch.Tensor], RouterOutput]
             ) -> Callable[[torch.Tensor], RouterOutput]:
        def forward(hidden: torch.Tensor) -> RouterOutput:
            out = own(hidden)
            self.put(layer, out[2])
            return out

        return forward

    def listed_tokens(self) -> int:
        """Tokens the listed forwards routed (those of any one routed layer)."""
        return next((sum(int(p.shape[0]) for p in parts) for parts in self.listed if parts), 0)

    def grid(self, columns: int, rows: int) -> torch.Tensor:
        """[rows, columns, layers, k]: the listed ids of the last `rows` rows of forwards over
        grids `columns` wide, the lists emptied."""
        out: torch.Tensor | None = None
        for layer, parts in enumerate(self.listed):
            if not parts:
                continue
            flat = torch.cat(parts) if len(parts) > 1 else parts[0]
            ids = flat[flat.shape[0] - rows * columns:].reshape(rows, columns, self.k)
            if out is None:
                out = torch.zeros((ids.shape[0], columns, self.layers, self.k), dtype=IDS, device=ids.device)
            out[:, :, layer] = ids
            parts.clear()
        if out is None:
            raise RuntimeError("routing replay: the sampled model's forward called no router")
        return out

    def last(self, n: int) -> torch.Tensor:
        """[n, layers, k]: the ids of the last forward's last column for its n rows."""
        if self.fixed:
            return self.buffer[:n]
        ids = torch.zeros((n, self.layers, self.k), dtype=IDS, device=self.buffer.device)
        for layer, parts in enumerate(self.listed):
            if parts:
                ids[:, layer] = parts[-1].reshape(n, -1, self.k)[:, -1]
                parts.clear()
        return ids
