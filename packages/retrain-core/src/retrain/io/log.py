"""Buffered JSONL append logging.

Rows are encoded when logged (compact JSON, one object per line) and written in whole lines,
so a crash leaves at most one torn last line, which every reader skips. `flush_every=1` makes
the file durable per row (metrics); larger buffers suit high-volume logs (generations).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any


def encode_row(row: Mapping[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_default) + "\n"


def _default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


class JsonlLogger:
    def __init__(self, path: str | Path, *, flush_every: int = 1, flush_interval_s: float | None = None,
                 enabled: bool = True, fsync: bool = False) -> None:
        self.path = Path(path)
        self.flush_every = max(1, flush_every)
        self.flush_interval_s = flush_interval_s
        self.enabled = enabled
        self.fsync = fsync
        self._buffer: list[str] = []
        self._file: IO[str] | None = None
        self._last_flush = time.monotonic()
        self._lock = threading.Lock()

    def log(self, row: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        line = encode_row(row)
        with self._lock:
            self._buffer.append(line)
            due = len(self._buffer) >= self.flush_every or (
                self.flush_interval_s is not None and time.monotonic() - self._last_flush >= self.flush_interval_s)
            if due:
                self._flush_locked()

    def log_many(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            self.log(row)

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open across calls
        self._file.write("".join(self._buffer))
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())
        self._buffer.clear()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        with self._lock:
            self._flush_locked()
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> JsonlLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every complete JSON object line; blank, torn or non-object lines are skipped."""
    p = Path(path)
    if not p.exists():
        return []
    rows = []
    with open(p, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break  # a torn last line: the writer died mid-line
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict):
                rows.append(obj)
    return rows


def truncate_jsonl(path: str | Path, keep: Any) -> int:
    """Rewrite `path` atomically keeping complete rows for which keep(row) is true; returns
    the number of rows kept. Used on resume to drop rows past the checkpoint."""
    from retrain.io.atomic import write_text_atomic

    p = Path(path)
    if not p.exists():
        return 0
    rows = [r for r in read_jsonl(p) if keep(r)]
    write_text_atomic(p, "".join(encode_row(r) for r in rows))
    return len(rows)
