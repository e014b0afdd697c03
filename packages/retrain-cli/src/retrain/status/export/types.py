"""What one exporter scan produces; every endpoint renders the same snapshot."""

from __future__ import annotations

import msgspec

from retrain.status.report import StatusReport


class Snapshot(msgspec.Struct, kw_only=True):
    generated_at: float
    root: str
    scan_seconds: float
    report: StatusReport
