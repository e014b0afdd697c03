"""A table's examples as a lazy sequence, and the one pass that decides which rows give one.

The pass reads every row once, in record batches streamed from the Arrow files (not through
the memory map, so the pages it reads do not stay resident in the process), maps each with the
`RowMapping`, counts the rows that give no example by reason, and, for a hash split, marks the
rows held out (`retrain.data.split`, keyed on the example's prompt). What it keeps is an array
of row numbers; an example is built from the memory-mapped table only when it is asked for.
So a million rows cost eight megabytes of row numbers, and the same mapping builds an example
in the pass and on access: the rows the pass keeps are exactly those that give one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np

from retrain.data.source import ExampleSequence
from retrain.data.split import held_out_rule
from retrain.data.table.mapping import RowMapping
from retrain.data.table.where import Opened
from retrain.types import Example

_BATCH = 4096
#: the stream of the seed the dataset source's order is drawn from (its own, beside the seed's others)
_SHUFFLE_STREAM = 0x64617461


@dataclass
class Drops:
    """Rows that give no example: reason -> count, and the first such row of each reason."""

    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, int] = field(default_factory=dict)

    def add(self, reason: str, row: int) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        self.first.setdefault(reason, row)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class Scan:
    """What the pass found: the usable rows in table order, which of them the hash split holds
    out (None without a hash split), the rows dropped, and the table's size."""

    usable: np.ndarray  # (U,) int64 row numbers
    held: np.ndarray | None  # (U,) bool
    drops: Drops
    rows: int


def _batches(opened: Opened, columns: Sequence[str]) -> Iterator[dict[str, list[Any]]]:
    """The columns of every row in record batches: streamed from the Arrow files when the
    dataset is those files whole, else read from the table."""
    import pyarrow as pa  # type: ignore[import-untyped]

    files = _whole_files(opened.dataset)
    if files is None:
        for batch in opened.dataset.data.table.select(list(columns)).to_batches(_BATCH):
            yield {name: batch.column(name).to_pylist() for name in columns}
        return
    for path in files:
        with pa.OSFile(path) as f:
            for batch in pa.ipc.open_stream(f):
                yield {name: batch.column(name).to_pylist() for name in columns}


def _whole_files(dataset: Any) -> list[str] | None:
    """The Arrow files a dataset reads whole and in order, or None (a slice, a cast, a join,
    rows in memory)."""
    from datasets.table import ConcatenationTable, MemoryMappedTable  # type: ignore[import-untyped]

    table = dataset.data
    blocks = table.blocks if isinstance(table, ConcatenationTable) else [[table]]
    files = []
    for row in blocks:
        if len(row) != 1 or not isinstance(row[0], MemoryMappedTable):
            return None
        if any(op != "replace_schema_metadata" for op, _, _ in row[0].replays):
            return None
        files.append(row[0].path)
    return files


def scan(opened: Opened, mapping: RowMapping, split_seed: int | None) -> Scan:
    """Every row mapped once; `split_seed` set: the `dataset` hash split under that seed."""
    usable: list[int] = []
    held: list[bool] = []
    drops = Drops()
    columns = mapping.columns
    rule = held_out_rule("dataset", split_seed) if split_seed is not None else None
    parts = mapping.parts
    row = 0
    for batch in _batches(opened, columns):
        for cells in zip(*(batch[name] for name in columns), strict=True):
            got = parts(dict(zip(columns, cells, strict=True)))
            if isinstance(got, str):
                drops.add(got, row)
            else:
                usable.append(row)
                if rule is not None:
                    held.append(rule(got[0]))
            row += 1
    return Scan(np.asarray(usable, dtype=np.int64), np.asarray(held, dtype=bool) if split_seed is not None else None,
                drops, row)


def shuffled(rows: np.ndarray, seed: int) -> np.ndarray:
    """`rows` in the order of `seed`: sorted by one 64-bit draw each from PCG64. A bit generator's
    raw stream is fixed across numpy versions (its Generator's shuffle is not promised to be),
    and a stable sort settles ties, so a checkpoint's cursor still points at the same prompts
    after an upgrade; for a million rows this takes a tenth of Python's shuffle's second."""
    draws = np.random.PCG64(np.random.SeedSequence([seed, _SHUFFLE_STREAM])).random_raw(len(rows))
    return np.asarray(rows, dtype=np.int64)[np.argsort(draws, kind="stable")]


class TableExamples(ExampleSequence):
    """The examples of some rows of a table, in a fixed order, each built when asked for.

    `notes` are the lines that say what the load dropped and why (a caller prints them)."""

    def __init__(self, opened: Opened, mapping: RowMapping, order: np.ndarray, notes: Sequence[str] = ()) -> None:
        self.opened = opened
        self.mapping = mapping
        self.order = order
        self.notes = tuple(notes)
        table = opened.dataset.data.table
        self._columns = {name: table.column(name) for name in mapping.columns}

    def __len__(self) -> int:
        return len(self.order)

    @overload
    def __getitem__(self, i: int) -> Example: ...

    @overload
    def __getitem__(self, i: slice) -> TableExamples: ...

    def __getitem__(self, i: int | slice) -> Example | TableExamples:
        if isinstance(i, slice):
            return TableExamples(self.opened, self.mapping, self.order[i], self.notes)
        got = self.mapping.example(self.row(int(self.order[i])))
        if not isinstance(got, Example):  # the pass kept only rows that give one
            raise AssertionError(f"row {int(self.order[i])} of {self.opened.label} gives no example: {got}")
        return got

    def row(self, j: int) -> dict[str, Any]:
        """Table row `j`'s cells of the columns the mapping reads."""
        return {name: column[j].as_py() for name, column in self._columns.items()}

    def location(self, i: int) -> str:
        """Where the i-th example's row is (`file:line` for JSON Lines)."""
        return locate(self.opened, int(self.order[i]))


def locate(opened: Opened, row: int) -> str:
    """`file:line` of a JSON Lines row (rows are the lines that are not blank), else the row's number."""
    files = [f for f in opened.files if f.suffix.lower() == ".jsonl"]
    if files and len(files) == len(opened.files):
        seen = 0
        for f in files:
            count, line = _nth_line(f, row - seen)
            if line:
                return f"{f}:{line}"
            seen += count
    return f"{opened.label} row {row + 1}"


def _nth_line(path: Path, n: int) -> tuple[int, int]:
    """(non-blank lines in `path`, the line number of its n-th non-blank line or 0)."""
    count = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if raw.strip():
                if count == n:
                    return count + 1, number
                count += 1
    return count, 0


def nonblank_lines(path: Path) -> list[int]:
    """The numbers of a JSON Lines file's lines that are not blank: its rows' lines, in order."""
    with open(path, "rb") as f:
        return [number for number, raw in enumerate(f, start=1) if raw.strip()]
