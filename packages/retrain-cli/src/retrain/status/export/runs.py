"""JSON bodies: `/v1/runs` (every run and campaign of the snapshot) and `/healthz`."""

from __future__ import annotations

import json

import msgspec

from retrain.status.export.types import Snapshot


def runs_body(snapshot: Snapshot) -> bytes:
    report = msgspec.to_builtins(snapshot.report)
    body = {"generated_at": snapshot.generated_at, "root": snapshot.root,
            "scan_seconds": snapshot.scan_seconds, "runs": report["runs"],
            "campaigns": report["campaigns"]}
    return json.dumps(body, indent=2, sort_keys=True).encode("utf-8") + b"\n"


def health_body(snapshot: Snapshot) -> bytes:
    body = {"status": "ok", "root": snapshot.root, "run_count": len(snapshot.report.all_runs()),
            "campaign_count": len(snapshot.report.campaigns)}
    return json.dumps(body, sort_keys=True).encode("utf-8") + b"\n"
