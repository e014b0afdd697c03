"""Which SFT rows each step trains on: a pure function of (order, seed, step), so a resumed
run takes exactly the batches an uninterrupted one would, with no cursor to save.

Steps take consecutive `batch_size` rows of a stream that concatenates epochs; an epoch is one
pass over every row in the epoch's order, and a batch may span two epochs. Orders
(`sft_batch_order`):
- `shuffle`: a permutation drawn from the seed (and the epoch, with `sft_reshuffle_each_epoch`);
- `length` / `length_asc`, `length_desc`: by token count, ties by file order;
- `length_bucket`: shuffled, then each window of `sft_length_bucket_size` rows sorted by length
  (0: one window, the whole epoch), so batches hold rows of similar length without the whole
  run going from short to long.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

ORDERS = ("shuffle", "length", "length_asc", "length_desc", "length_bucket")


@dataclass(frozen=True)
class BatchSchedule:
    lengths: tuple[int, ...]
    batch_size: int
    order: str = "shuffle"
    seed: int = 0
    bucket: int = 0
    reshuffle: bool = False
    _orders: dict[int, tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"unknown sft_batch_order {self.order!r} (one of {', '.join(ORDERS)})")
        if not self.lengths or self.batch_size <= 0:
            raise ValueError("an SFT schedule needs rows and a positive batch size")

    @property
    def rows(self) -> int:
        return len(self.lengths)

    def epoch_order(self, epoch: int) -> tuple[int, ...]:
        key = epoch if self.reshuffle else 0
        found = self._orders.get(key)
        if found is None:
            self._orders.clear()  # a run moves forward: keep one epoch's order
            found = self._orders[key] = _epoch_order(self, key)
        return found

    def batch(self, step: int) -> list[int]:
        """Row indices of step `step` (0-based)."""
        out = []
        for pos in range(step * self.batch_size, (step + 1) * self.batch_size):
            epoch, i = divmod(pos, self.rows)
            out.append(self.epoch_order(epoch)[i])
        return out

    def epoch_of(self, step: int) -> float:
        """Epochs completed at the end of step `step` (fractional)."""
        return (step + 1) * self.batch_size / self.rows


def _by_length(indices: Sequence[int], lengths: Sequence[int], reverse: bool = False) -> list[int]:
    return sorted(indices, key=lambda i: (-lengths[i] if reverse else lengths[i], i))


def _epoch_order(s: BatchSchedule, epoch: int) -> tuple[int, ...]:
    n = s.rows
    if s.order in ("length", "length_asc"):
        return tuple(_by_length(range(n), s.lengths))
    if s.order == "length_desc":
        return tuple(_by_length(range(n), s.lengths, reverse=True))
    rng = random.Random(f"retrain-sft/{s.seed}/{epoch}")  # str seeds hash with sha512: stable everywhere
    order = list(range(n))
    rng.shuffle(order)
    if s.order == "shuffle":
        return tuple(order)
    window = s.bucket or n
    return tuple(i for k in range(0, n, window) for i in _by_length(order[k:k + window], s.lengths))
