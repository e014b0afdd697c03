"""What a layer of retrain's decoder reads besides its input: the per-row state of every layer
(keys and values, a gated delta layer's conv and recurrent states), the rotary tables at the
rows' positions, the masks of each attention window, Gemma 4's per-layer inputs. One `Prefill`
per chunk of prompts, one `Step` per decoded token."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

#: a layer's per-row state: tensors whose first dimension is the batch's rows
State = list[torch.Tensor]


@dataclass
class Prefill:
    """A chunk of prompts [b, p] (left-padded) whose rows are `rows` of the cache: row r
    continues prompt `source[r - rows.start]` of the chunk."""

    mask: torch.Tensor  # [b, p] bool: a real token
    attend: dict[int, torch.Tensor]  # window (0: full) -> [b, 1, p, p] bool: key j seen from query i
    rope: dict[str, tuple[torch.Tensor, torch.Tensor]]  # table key -> cos, sin [b, 1, p, rotary dims]
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
    views: dict[int, tuple[slice, torch.Tensor]]  # window -> (columns attended, additive key mask [n, 1, 1, c])
    state: list[State]
    per_layer: torch.Tensor | None  # [n, layers, size]
