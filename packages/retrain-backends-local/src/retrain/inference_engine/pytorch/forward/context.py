"""What a layer of retrain's decoder reads besides its input: the per-row state of every layer
(keys and values, a gated delta layer's conv and recurrent states), the rotary tables at the
rows' positions, the positions themselves, the masks of each attention span, Gemma 4's
per-layer inputs. One `Prefill` per chunk of prompts, one `Step` per decoded token."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

#: a layer's per-row state: tensors whose first dimension is the batch's rows
State = list[torch.Tensor]
#: the keys a layer sees, by which its mask is kept: ("full", 0), ("sliding", window) or
#: ("chunked", chunk length) (`retrain.models.layers.LayerPlan.attention`)
Span = tuple[str, int]
FULL: Span = ("full", 0)


@dataclass
class Prefill:
    """A chunk of prompts [b, p] (left-padded) whose rows are `rows` of the cache: row r
    continues prompt `source[r - rows.start]` of the chunk."""

    mask: torch.Tensor  # [b, p] bool: a real token
    attend: dict[Span, torch.Tensor]  # span -> [b, 1, p, p] bool: key j seen from query i
    rope: dict[str, tuple[torch.Tensor, torch.Tensor]]  # table key -> cos, sin [b, 1, p, rotary dims]
    positions: torch.Tensor  # [b, p] each token's position in its prompt (padding: 0)
    rows: slice
    source: torch.Tensor
    state: list[State]
    per_layer: torch.Tensor | None  # [b, p, layers, size]
    sources: frozenset[int] = frozenset()  # layers whose keys and values another layer reads
    shared: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)  # their [b, kv, p, d]


@dataclass
class Step:
    """One decoded token for each of the first `n` rows, at cache column `column`."""

    n: int
    column: torch.Tensor  # [1]
    rope: dict[str, tuple[torch.Tensor, torch.Tensor]]  # table key -> cos, sin [n, 1, rotary dims]
    positions: torch.Tensor  # [n] the staged token's position in its row
    views: dict[Span, tuple[slice, torch.Tensor]]  # span -> (columns attended, additive key mask [n, 1, 1, c])
    state: list[State]
    per_layer: torch.Tensor | None  # [n, layers, size]
