"""Metrics JSONL readers: a one-pass scan with aggregates, and a tail read from the file end.

The files are append-only and may be read while a trainer writes them. Every reader skips
blank lines, malformed lines and rows that are not JSON objects; the last line may be torn
(no newline yet, cut mid-object), and a valid JSON object is always complete, so a row is
used exactly when it decodes. Numbers are ints and floats, never bools; non-finite values
count as missing in aggregates.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from retrain.io.json import decode_object

Row = dict[str, Any]

#: Per-step wall-clock fields, in order of preference (RL rows, then standalone SFT rows).
STEP_TIME_FIELDS = ("step_time_s", "time_s")
#: The `phase` of a supervised row (warmup inside an RL run, or trainer = sft), which counts its
#: own steps from 0; RL rows have no phase or phase "rl".
SFT_PHASE = "sft"


def number(value: Any) -> float | None:
    """A finite int/float as float; None for bools, strings, NaN, infinities and missing values."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def row_step_time(row: Mapping[str, Any]) -> float | None:
    for key in STEP_TIME_FIELDS:
        value = number(row.get(key))
        if value is not None:
            return value
    return None


def is_sft_row(row: Mapping[str, Any]) -> bool:
    return row.get("phase") == SFT_PHASE


def row_step(row: Mapping[str, Any], default: int) -> int:
    value = row.get("step")
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def iter_jsonl_objects(path: str | Path) -> Iterator[Row]:
    """Every object row of a JSONL file in order; nothing when the file is missing."""
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    obj = decode_object(line)
                    if obj is not None:
                        yield obj
    except OSError:
        return


@dataclass(frozen=True)
class Tail:
    """The newest object rows of a JSONL file, oldest first."""

    rows: list[Row]
    #: True when `rows` are all the object rows the file holds (it was read to its start).
    whole_file: bool
    size: int
    mtime: float | None

    @property
    def last(self) -> Row | None:
        return self.rows[-1] if self.rows else None


def read_tail(
    path: str | Path, limit: int = 16, *, block: int = 1 << 16, max_bytes: int = 16 << 20
) -> Tail:
    """Up to `limit` last object rows, reading backwards from the end in `block`-sized chunks.

    Reads at most `max_bytes` (plus one block), so the cost does not grow with the history.
    """
    try:
        with open(path, "rb") as f:
            return _read_tail(f, limit, block, max_bytes)
    except OSError:
        return Tail([], True, 0, None)


def _read_tail(f: BinaryIO, limit: int, block: int, max_bytes: int) -> Tail:
    st = os.fstat(f.fileno())
    newest_first: list[Row] = []
    pos = st.st_size
    carry = b""
    full = False
    while pos > 0 and st.st_size - pos < max_bytes and not full:
        n = min(block, pos)
        pos -= n
        f.seek(pos)
        lines = (f.read(n) + carry).split(b"\n")
        carry = lines[0]  # may start mid-line until the file start is reached
        full = _take(reversed(lines[1:]), newest_first, limit)
    whole = pos == 0 and not full
    if whole:
        _take([carry], newest_first, limit)
    newest_first.reverse()
    return Tail(newest_first, whole, st.st_size, st.st_mtime)


def _take(lines: Iterable[bytes], out: list[Row], limit: int) -> bool:
    """Appends decodable object rows to `out`; True once it holds `limit` rows."""
    for line in lines:
        if len(out) >= limit:
            return True
        if line.strip():
            obj = decode_object(line)
            if obj is not None:
                out.append(obj)
    return len(out) >= limit


def last_row(path: str | Path) -> Row | None:
    return read_tail(path, 1).last


@dataclass
class MetricsScan:
    """Aggregates of one metrics file, from a single pass."""

    rows: int = 0
    first: Row | None = None
    last: Row | None = None
    #: Sum of per-step wall-clock times (`step_time_s`, else `time_s`).
    wall_time_s: float = 0.0
    means: dict[str, float] = field(default_factory=dict)
    maxima: dict[str, float] = field(default_factory=dict)
    #: field -> [(step, value)] over the rows where the field is a finite number.
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    @property
    def steps_done(self) -> int:
        """The last row's 0-based step + 1 (as `retrain status` counts); 0 without rows."""
        return 0 if self.last is None else row_step(self.last, self.rows - 1) + 1


def scan_metrics_file(
    path: str | Path,
    *,
    mean_fields: Iterable[str] = (),
    max_fields: Iterable[str] = (),
    series_fields: Iterable[str] = (),
) -> MetricsScan:
    """One pass over a metrics file: row count, first/last rows, wall time, means, maxima and
    per-step series of the requested fields."""
    return summarize_rows(iter_jsonl_objects(path), mean_fields=mean_fields,
                          max_fields=max_fields, series_fields=series_fields)


def summarize_rows(
    rows: Iterable[Row],
    *,
    mean_fields: Iterable[str] = (),
    max_fields: Iterable[str] = (),
    series_fields: Iterable[str] = (),
) -> MetricsScan:
    means_of, max_of, series_of = tuple(mean_fields), tuple(max_fields), tuple(series_fields)
    sums = dict.fromkeys(means_of, 0.0)
    counts = dict.fromkeys(means_of, 0)
    scan = MetricsScan(series={name: [] for name in series_of})
    for row in rows:
        if scan.first is None:
            scan.first = row
        scan.last = row
        step = row_step(row, scan.rows)
        scan.rows += 1
        step_time = row_step_time(row)
        if step_time is not None:
            scan.wall_time_s += step_time
        for name in means_of:
            value = number(row.get(name))
            if value is not None:
                sums[name] += value
                counts[name] += 1
        for name in max_of:
            value = number(row.get(name))
            if value is not None and (name not in scan.maxima or value > scan.maxima[name]):
                scan.maxima[name] = value
        for name in series_of:
            value = number(row.get(name))
            if value is not None:
                scan.series[name].append((step, value))
    scan.means = {name: sums[name] / counts[name] for name in means_of if counts[name]}
    return scan


def scan_phases(
    path: str | Path,
    *,
    mean_fields: Iterable[str] = (),
    max_fields: Iterable[str] = (),
    series_fields: Iterable[str] = (),
) -> tuple[MetricsScan, MetricsScan]:
    """(RL rows, SFT rows) of a metrics file, each aggregated as `scan_metrics_file` does: the
    two phases count their own steps, so neither's series or step count includes the other's."""
    rl: list[Row] = []
    sft: list[Row] = []
    for row in iter_jsonl_objects(path):
        (sft if is_sft_row(row) else rl).append(row)
    fields = (tuple(mean_fields), tuple(max_fields), tuple(series_fields))
    return (summarize_rows(rl, mean_fields=fields[0], max_fields=fields[1], series_fields=fields[2]),
            summarize_rows(sft, mean_fields=fields[0], max_fields=fields[1], series_fields=fields[2]))
