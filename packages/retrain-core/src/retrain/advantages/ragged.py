"""Ragged token batches: the completions of a group as one flat array plus offsets.

Every per-completion statistic (GTPO means, SEPA execution means, Delight scales) is a
segment reduction over the flat array, so a group costs a fixed number of numpy passes
whatever its shape. Completions may be empty; a reduction over an empty segment yields 0
with a count of 0, and callers decide what an empty segment means.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]

#: Largest finite float64; outputs are saturated to +/- this so overflow never yields inf.
FLOAT_MAX = float(np.finfo(np.float64).max)


def saturate(x: Floats) -> Floats:
    """Clip +/-inf (from an overflowing product of finite values) to the largest finite float."""
    return np.clip(x, -FLOAT_MAX, FLOAT_MAX, out=x)


class Ragged:
    """Segment bookkeeping of `n` completions whose tokens are stored back to back."""

    __slots__ = ("_seg", "_starts", "lengths", "n", "nonempty", "offsets", "total")

    def __init__(self, lengths: Sequence[int] | Ints) -> None:
        self.lengths: Ints = np.asarray(lengths, dtype=np.int64).reshape(-1)
        self.n = int(self.lengths.shape[0])
        self.offsets: Ints = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=self.offsets[1:])
        self.total = int(self.offsets[-1])
        self.nonempty: NDArray[np.bool_] = self.lengths > 0
        # Starts of the non-empty segments: strictly increasing, so `ufunc.reduceat` over them
        # reduces exactly each segment (empty ones are filled in separately).
        self._starts: Ints = self.offsets[:-1][self.nonempty]
        self._seg: Ints | None = None

    @property
    def seg(self) -> Ints:
        """Segment index of every token (built on first use; dense ops use `expand`)."""
        if self._seg is None:
            self._seg = np.repeat(np.arange(self.n, dtype=np.int64), self.lengths)
        return self._seg

    def expand(self, per_segment: NDArray[Any]) -> NDArray[Any]:
        """Broadcast one value per segment to every token of the segment."""
        return np.repeat(per_segment, self.lengths)

    @classmethod
    def of(cls, rows: Sequence[ArrayLike]) -> tuple[Ragged, Floats]:
        """Layout and the flat float64 values of `rows` (each a 1-D sequence)."""
        arrays = [np.asarray(r).reshape(-1) for r in rows]
        layout = cls([a.shape[0] for a in arrays])
        flat = np.concatenate(arrays, dtype=np.float64) if arrays else np.zeros(0, dtype=np.float64)
        return layout, flat

    def flatten(
        self, rows: Sequence[ArrayLike], *, what: str, dtype: Any = np.float64
    ) -> NDArray[Any]:
        """Flat values of `rows`, checked against this layout's lengths."""
        if len(rows) != self.n:
            raise ValueError(f"{what}: expected {self.n} rows, got {len(rows)}")
        arrays = [np.asarray(r).reshape(-1) for r in rows]
        for i, (a, n) in enumerate(zip(arrays, self.lengths.tolist(), strict=True)):
            if a.shape[0] != n:
                raise ValueError(f"{what}: row {i} has {a.shape[0]} values for {n} tokens")
        if not arrays:
            return np.zeros(0, dtype=dtype)
        return np.concatenate(arrays, dtype=dtype, casting="unsafe")

    def sum(self, x: Floats) -> Floats:
        """Per-segment sums of a flat array."""
        return self._reduce(np.add, x, 0.0)

    def _reduce(self, op: np.ufunc, x: NDArray[Any], empty: float) -> Floats:
        out = np.full(self.n, empty, dtype=np.float64)
        if self.total:
            out[self.nonempty] = op.reduceat(x, self._starts)
        return out

    def sum_at(self, x: Floats, idx: Ints) -> Floats:
        """Per-segment sums of x over the flat indices `idx` only (cheap for sparse idx)."""
        if idx.size == 0:
            return np.zeros(self.n, dtype=np.float64)
        return np.bincount(self.segment_of(idx), weights=x[idx], minlength=self.n).astype(
            np.float64, copy=False
        )

    def count_at(self, idx: Ints) -> Floats:
        if idx.size == 0:
            return np.zeros(self.n, dtype=np.float64)
        return np.bincount(self.segment_of(idx), minlength=self.n).astype(np.float64)

    def segment_of(self, idx: Ints) -> Ints:
        """Segment index of the flat positions `idx` (without building `seg`)."""
        return np.searchsorted(self.offsets[1:], idx, side="right").astype(np.int64)

    def count(self, where: NDArray[np.bool_]) -> Floats:
        return self._reduce(np.add, where.astype(np.float64), 0.0)

    def mean(self, x: Floats, where: NDArray[np.bool_] | None = None) -> tuple[Floats, Floats]:
        """(per-segment means, counts); the mean of an empty selection is 0."""
        if where is None:
            sums, counts = self.sum(x), self.lengths.astype(np.float64)
        else:
            sums, counts = self.sum(np.where(where, x, 0.0)), self.count(where)
        means = np.divide(sums, counts, out=np.zeros(self.n, dtype=np.float64), where=counts > 0)
        return means, counts

    def std(self, x: Floats) -> Floats:
        """Per-segment population standard deviation (two-pass); 0 for empty segments."""
        means, counts = self.mean(x)
        dev = x - self.expand(means)
        var = np.divide(self.sum(dev * dev), counts, out=np.zeros(self.n), where=counts > 0)
        return np.sqrt(var)

    def spread(self, x: Floats) -> Floats:
        """Per-segment max - min (0 for empty segments)."""
        return self._reduce(np.maximum, x, 0.0) - self._reduce(np.minimum, x, 0.0)

    # ------------------------------------------------------------ sorting within segments
    # Segments are sorted as the rows of a padded 2-D array (a plain reshape when every
    # completion has the same length): numpy sorts rows far faster than a lexsort on
    # (segment, value) pairs.

    @property
    def width(self) -> int:
        return int(self.lengths.max()) if self.n else 0

    def padded(self, x: NDArray[Any], fill: float) -> NDArray[Any]:
        """An (n, width) array holding each segment's values left-aligned, padded with fill."""
        width = self.width
        if self.n and bool(np.all(self.lengths == width)):
            return x.reshape(self.n, width)
        out = np.full((self.n, width), fill, dtype=x.dtype)
        out[self.seg, np.arange(self.total) - np.repeat(self.offsets[:-1], self.lengths)] = x
        return out

    def sorted_rows(self, x: Floats) -> Floats:
        """Each segment's values sorted ascending, as padded rows (+inf after the end)."""
        return np.sort(self.padded(x, np.inf), axis=1)

    def median(self, x: Floats) -> Floats:
        """Per-segment median (mean of the two middle values when even); 0 when empty."""
        out = np.zeros(self.n, dtype=np.float64)
        if self.total == 0:
            return out
        rows = self.sorted_rows(x)
        idx = np.flatnonzero(self.nonempty)
        lo, hi = (self.lengths[idx] - 1) // 2, self.lengths[idx] // 2
        out[idx] = 0.5 * (rows[idx, lo] + rows[idx, hi])
        return out

    def half_sums(self, x: Floats) -> tuple[Floats, Floats]:
        """(sum of the floor(n/2) smallest, sum of the floor(n/2) largest values) per segment."""
        bottom, top = np.zeros(self.n), np.zeros(self.n)
        half = self.lengths // 2
        idx = np.flatnonzero(half > 0)
        if idx.size == 0:
            return bottom, top
        cums = np.cumsum(self.sorted_rows(x)[idx], axis=1)
        n, h = self.lengths[idx], half[idx]
        rows = np.arange(idx.size)
        bottom[idx] = cums[rows, h - 1]
        before_top = np.where(n - h - 1 >= 0, cums[rows, np.maximum(n - h - 1, 0)], 0.0)
        top[idx] = cums[rows, n - 1] - before_top
        return bottom, top

    def top_k_mask(self, key: Floats, k: Ints) -> NDArray[np.bool_]:
        """True for the k[i] tokens of segment i with the largest key; ties at the cut are
        taken in index order (a stable descending sort)."""
        keep = np.zeros(self.total, dtype=bool)
        if self.total == 0:
            return keep
        k = np.minimum(np.maximum(k, 0), self.lengths)
        rows = np.sort(self.padded(key, -np.inf), axis=1)  # ascending, padding first
        width = rows.shape[1]
        has = k > 0
        cut = np.full(self.n, np.inf)
        cut[has] = rows[np.flatnonzero(has), width - k[has]]
        cut_flat: Floats = self.expand(cut)
        above: NDArray[np.bool_] = key > cut_flat
        tied: NDArray[np.bool_] = key == cut_flat
        room: Ints = self.expand(k - self.sum(above.astype(np.float64)).astype(np.int64))
        out: NDArray[np.bool_] = above | (tied & (self._tied_rank(tied) <= room))
        return out

    def _tied_rank(self, tied: NDArray[np.bool_]) -> Ints:
        """1-based position of each True among the Trues of its segment (index order)."""
        running = np.cumsum(tied, dtype=np.int64)
        starts: Ints = np.concatenate(([0], running))[self.offsets[:-1]]
        out: Ints = running - self.expand(starts)
        return out

    def split(self, flat: NDArray[Any]) -> list[NDArray[Any]]:
        """Per-segment views of a flat array."""
        return np.split(flat, self.offsets[1:-1].tolist()) if self.n else []
