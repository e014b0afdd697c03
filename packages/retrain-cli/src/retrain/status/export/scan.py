"""A briefly cached scan of the log root, shared by all request threads.

One scan runs at a time; requests arriving while it runs wait for it and reuse its result,
so a burst of scrapes costs one scan, and a snapshot is never older than `ttl` seconds when
handed out (plus the duration of the scan that produced it).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from retrain.status.export.types import Snapshot
from retrain.status.scan import scan_all


class SnapshotCache:
    def __init__(self, root: Path, ttl: float = 2.0) -> None:
        self.root = root
        self.ttl = ttl
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._taken_at = 0.0
        self.scans = 0

    def get(self) -> Snapshot:
        with self._lock:
            if self._snapshot is None or time.monotonic() - self._taken_at > self.ttl:
                started = time.monotonic()
                report = scan_all(self.root, confined=True)
                self._taken_at = time.monotonic()
                self._snapshot = Snapshot(generated_at=report.generated_at, root=str(self.root),
                                          scan_seconds=self._taken_at - started, report=report)
                self.scans += 1
            return self._snapshot
