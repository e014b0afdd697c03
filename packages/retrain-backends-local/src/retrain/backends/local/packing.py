"""Rows of a micro-batch laid end to end without padding, each shared prefix computed once.

A row's hidden state at position j depends on its tokens 0..j alone (causal attention within
the row), so rows that begin alike share those positions exactly: the eight completions of a
prompt share the prompt, completions that begin alike share that beginning. The rows are
sorted lexicographically and each takes from its predecessor the positions the two have in
common, which in sorted order is the longest prefix it shares with any earlier row (a trie).
Every other position is a token of its own in the stream, at the position id it has in its
row, so rotary and absolute position embeddings see each row starting at 0.

The layers that act per token (projections, MLPs, norms) then run over the stream, T tokens
instead of rows x widest; attention runs per row over the row's view of the stream
(`retrain.backends.local.attention`), so no row sees another's tokens. Rows that carry the
sampler's expert choices (routing replay) share a position only where those agree too: the
stream token is routed once, as both rows' records say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Packed:
    """The stream of one micro-batch of R rows (row r has L_r tokens, L = max L_r).

    Row r's view `row_index[r, :L_r]` lists the stream token at each of its positions; an
    attention over the view computes that row's outputs, and the stream token at view
    position p takes the output of the row that `own` names (the one that put it there).
    """

    input_ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T]
    row_index: torch.Tensor  # [R, L] stream index of (row, position); T past a row's end
    own: torch.Tensor  # [T] flat index r * L + p of the row and position that computes each token
    view_index: torch.Tensor  # [sum L_r] the views end to end (varlen attention)
    cu_seqlens: torch.Tensor  # [R + 1] int32 offsets of the views in view_index
    own_view: torch.Tensor  # [T] each token's place in view_index
    max_len: int

    @property
    def tokens(self) -> int:
        return int(self.input_ids.shape[1])

    def positions(self, mask: torch.Tensor) -> torch.Tensor:
        """[N] stream indices of the hidden states at the (row, position) pairs of `mask`
        [R, L - 1] (the predicting positions of a shifted batch), in row-major order."""
        return self.row_index[:, : mask.shape[1]][mask]

    def to(self, device: torch.device) -> Packed:
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=True)

        return Packed(move(self.input_ids), move(self.position_ids), move(self.row_index), move(self.own),
                      move(self.view_index), move(self.cu_seqlens), move(self.own_view), self.max_len)


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def pack(rows: Sequence[Sequence[int]], *, share: bool = True, routes: np.ndarray | None = None) -> Packed:
    """The stream of `rows` (token lists, in the micro-batch's row order). `share = False`
    gives every row all of its tokens (what varlen attention needs when views must not
    overlap; nothing in this module requires it). `routes` [R, L, ...]: each row's expert ids
    per position, which a shared position must have alike too."""
    order = sorted(range(len(rows)), key=lambda r: list(rows[r])) if share else list(range(len(rows)))
    width = max((len(r) for r in rows), default=1)
    views: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * len(rows)
    tokens: list[np.ndarray] = []
    positions: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    total, previous = 0, -1
    for r in order:
        row = np.asarray(rows[r], dtype=np.int64)
        common = shared_prefix(rows[previous], rows[r]) if share and previous >= 0 else 0
        if routes is not None and common:
            common = _same_routes(routes[previous], routes[r], common)
        fresh = np.arange(total, total + len(row) - common, dtype=np.int64)
        views[r] = np.concatenate([views[previous][:common], fresh]) if common else fresh
        tokens.append(row[common:])
        place = np.arange(common, len(row), dtype=np.int64)
        positions.append(place)
        owners.append(r * width + place)
        total += len(row) - common
        previous = r
    return _tensors(views, tokens, positions, owners, total, width)


def _same_routes(a: np.ndarray, b: np.ndarray, n: int) -> int:
    """How many of the first `n` positions two rows route alike."""
    differ = np.flatnonzero((a[:n] != b[:n]).reshape(n, -1).any(axis=1))
    return int(differ[0]) if differ.size else n


def _tensors(views: list[np.ndarray], tokens: list[np.ndarray], positions: list[np.ndarray],
             owners: list[np.ndarray], total: int, width: int) -> Packed:
    lengths = np.array([len(v) for v in views], dtype=np.int64)
    row_index = np.full((len(views), width), total, dtype=np.int64)
    for r, view in enumerate(views):
        row_index[r, : len(view)] = view
    own = np.concatenate(owners) if owners else np.empty(0, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    # flat r * width + p -> offsets[r] + p: the same (row, position) in the gathered views
    own_view = offsets[own // width] + own % width
    return Packed(
        input_ids=torch.from_numpy(np.concatenate(tokens) if tokens else np.empty(0, np.int64))[None],
        position_ids=torch.from_numpy(np.concatenate(positions) if positions else np.empty(0, np.int64))[None],
        row_index=torch.from_numpy(row_index),
        own=torch.from_numpy(own),
        view_index=torch.from_numpy(np.concatenate(views) if views else np.empty(0, np.int64)),
        cu_seqlens=torch.from_numpy(offsets.astype(np.int32)),
        own_view=torch.from_numpy(own_view),
        max_len=int(lengths.max()) if lengths.size else 0,
    )
