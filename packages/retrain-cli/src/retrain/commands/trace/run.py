"""`retrain trace [CONFIG] [--flag value ...] [--json]`: the flow preflight (no GPU, no torch).

Exit status 0 when the trace passes, 1 when it finds an error (the reason is printed),
2 for a config that does not load.
"""

from __future__ import annotations

import json

from retrain.commands.config_args import resolve_config_args
from retrain.commands.errors import CommandFailed
from retrain.config import load_config
from retrain.training.preflight import TraceReport, trace


def render_text(report: TraceReport) -> str:
    flow = report.flow
    pipeline = flow.pipeline
    lines = [
        f"Condition: {flow.condition_label}",
        f"Backend: {flow.backend} (source: {flow.backend_source})",
        f"Token advantages: {'per token' if flow.capabilities.preserves_token_advantages else 'one per completion'}",
        f"Capabilities: {flow.capabilities.summary()}",
    ]
    if pipeline is not None:
        d = pipeline.describe()
        lines.append(
            "Pipeline: "
            + ", ".join(
                f"{k}={d[k]}"
                for k in (
                    "advantage_mode",
                    "transform_mode",
                    "uncertainty_kind",
                    "needs_planning",
                    "uses_sepa_controller",
                    "token_varying",
                    "batch_normalize",
                )
            )
        )
    lines.append(f"Probes: {report.probe_cases_passed}/{report.probe_cases_run} passed")
    for issue in report.issues:
        tag = "[ERROR]" if issue.severity == "error" else "[WARN]"
        lines.append(f"{tag} [{issue.category}] {issue.message}")
    lines.append("PASS" if report.ok else "FAIL")
    return "\n".join(lines)


def run(args: list[str], as_json: bool) -> None:
    path, overrides = resolve_config_args(args)
    loaded = load_config(path, overrides)
    report = trace(loaded.config)
    print(json.dumps(report.to_dict(), indent=2) if as_json else render_text(report))
    if not report.ok:
        errors = [i.message for i in report.issues if i.severity == "error"]
        raise CommandFailed(
            f"trace failed: {errors[0]}"
            if len(errors) == 1
            else f"trace failed with {len(errors)} errors",
            code=1,
        )
