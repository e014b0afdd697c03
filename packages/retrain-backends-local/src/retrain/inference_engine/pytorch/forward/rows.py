"""Rows of a transformers cache selected in place, whatever layers it holds: the prompt cache
copied to the rows that continue each prompt, finished rows dropped.

transformers' own `batch_select_indices` exists on key/value layers only: a hybrid cache's
linear-attention layers (Qwen3.5) hold a recurrent state and a conv state per row instead,
and have none. Here every per-row tensor a layer holds is selected: any tensor attribute
whose first dimension is the batch (keys and values of full, sliding-window, static and
offloaded layers; conv and recurrent states, kept in dicts, of linear-attention layers), on
the device it sits on (an offloaded layer's is the CPU). A quantised layer keeps its rows in
a packed form that cannot be indexed: `unselectable` says so before anything is touched, and
the caller prefills every row instead.
"""

from __future__ import annotations

from typing import Any

import torch


def unselectable(cache: Any) -> str | None:
    """Why the rows of `cache` cannot be selected; None when they can."""
    from transformers.cache_utils import QuantizedLayer

    layers = getattr(cache, "layers", None)
    if layers is None:
        return f"a {type(cache).__name__} has no layers to select rows from"
    for layer in layers:
        if isinstance(layer, QuantizedLayer):
            return f"a quantised cache layer ({type(layer).__name__}) keeps its rows packed"
    return None


def select_rows(cache: Any, index: torch.Tensor, batch: int) -> None:
    """Keep rows `index` (repeats allowed) of every per-row state of `cache`, whose batch is
    `batch` rows; the caller checked `unselectable` first."""
    for layer in cache.layers:
        for name, value in list(vars(layer).items()):
            if isinstance(value, torch.Tensor):
                setattr(layer, name, _rows(value, index, batch))
            elif isinstance(value, dict):
                for key, item in value.items():
                    if isinstance(item, torch.Tensor):
                        value[key] = _rows(item, index, batch)


def _rows(value: torch.Tensor, index: torch.Tensor, batch: int) -> torch.Tensor:
    if value.dim() == 0 or value.shape[0] != batch:
        return value
    return value.index_select(0, index.to(value.device))
