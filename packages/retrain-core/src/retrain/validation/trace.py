"""`retrain trace` and a trainer's start: the flow's preflight, after the config has loaded.

`trace(config)` resolves the flow (validate.preflight), checks what it needs installed
(validate.dependencies), the algorithm against the backend's capabilities (validate.compat),
then runs the pipeline on the probes (validate.probe), reporting every issue found. It touches
no GPU and imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.validation.compat import check_compat
from retrain.validation.dependencies import check_dependencies
from retrain.validation.preflight import Preflight, TraceIssue, resolve_preflight
from retrain.validation.probe import PROBE_CASES, run_probe

#: the built-in trainers whose run starts with `trace` and refuses to start when it fails
#: (retrain.training.trainers.rl.Trainer and its ttt_discover subclass); `retrain explain` runs
#: it for them too, so it refuses what the run would
PREFLIGHT_TRAINERS = ("retrain", "ttt_discover")


@dataclass
class TraceReport:
    flow: Preflight
    probe_cases_run: int
    probe_cases_passed: int

    @property
    def issues(self) -> list[TraceIssue]:
        return self.flow.issues

    @property
    def ok(self) -> bool:
        return not any(i.severity == "error" for i in self.issues)

    def refusal(self) -> str | None:
        """The one line a run that starts with this preflight fails with; None when it passes."""
        errors = [i.message for i in self.issues if i.severity == "error"]
        return "training flow validation failed: " + "; ".join(errors) if errors else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "probe_cases_run": self.probe_cases_run,
            "probe_cases_passed": self.probe_cases_passed,
            "issues": [i.to_dict() for i in self.issues],
            "flow": self.flow.to_dict(),
        }


def build_preflight(config: TrainConfig) -> Preflight:
    """The resolved flow with its dependency issues; problems become issues, not exceptions."""
    flow = resolve_preflight(config)
    check_dependencies(flow)
    return flow


def trace(config: TrainConfig) -> TraceReport:
    flow = build_preflight(config)
    check_compat(flow)
    run = passed = 0
    if flow.pipeline is not None:
        for case in PROBE_CASES:
            run += 1
            passed += run_probe(flow, case)
    return TraceReport(flow, run, passed)
