"""A run's flow as `retrain trace` resolves it: the advantage pipeline, the backend's declared
capabilities (from the catalog), and the issues found on the way.

Resolving touches no GPU and imports no torch. A problem becomes an issue, never an
exception: an error or a warning in one of four categories, compat (backend vs algorithm),
probe (the pipeline on synthetic groups), dep (missing packages) and config (settings that
do nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from retrain.advantages.pipeline import AdvantagePipeline, build_pipeline
from retrain.backends import catalog
from retrain.config.schema import TrainConfig

Severity = Literal["error", "warning"]
Category = Literal["compat", "probe", "dep", "config"]


@dataclass(frozen=True)
class TraceIssue:
    severity: Severity
    category: Category
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"severity": self.severity, "category": self.category, "message": self.message}


@dataclass
class Preflight:
    config: TrainConfig
    pipeline: AdvantagePipeline | None
    backend: str
    backend_source: str
    capabilities: catalog.BackendCapabilities
    backend_installed: bool = True
    issues: list[TraceIssue] = field(default_factory=list)
    # False for a built backend whose distribution is not installed here: `capabilities` are
    # then a placeholder's, and nothing may be judged by them
    capabilities_known: bool = True

    @property
    def condition_label(self) -> str:
        a = self.config.algorithm
        label = a.algorithm_mode or f"{a.advantage_mode}+{a.transform_mode}"
        return label + ("+echo" if self.config.echo.enabled else "")

    def add(self, severity: Severity, category: Category, message: str) -> None:
        self.issues.append(TraceIssue(severity, category, message))

    def to_dict(self) -> dict[str, Any]:
        p = self.pipeline
        return {
            "condition_label": self.condition_label,
            "backend": self.backend,
            "backend_capability_source": self.backend_source,
            "needs_planning": p.needs_planning if p else False,
            "uses_sepa_controller": p.uses_sepa_controller if p else False,
            "preserves_token_advantages": self.capabilities.preserves_token_advantages,
            "backend_capabilities": self.capabilities.as_dict(),
            "pipeline": p.describe() if p else None,
        }


def resolve_preflight(config: TrainConfig) -> Preflight:
    """The pipeline and the backend's catalog entry; a pipeline that does not build is a config
    error, a backend that is unknown or cannot run here a dep warning."""
    issues: list[TraceIssue] = []
    name = config.backend.backend
    entry = catalog.entry_for(name, config.backend.options)
    caps = entry.definition.capabilities if entry else catalog.PLUGIN_DEFAULT_CAPABILITIES
    source = entry.source if entry else "unknown"
    installed = bool(entry and entry.installed)
    pipeline: AdvantagePipeline | None = None
    try:
        pipeline = build_pipeline(config)
    except Exception as exc:
        issues.append(TraceIssue("error", "config", f"advantage pipeline: {type(exc).__name__}: {exc}"))
    known = entry is None or installed or not entry.definition.available
    flow = Preflight(config, pipeline, name, source, caps, installed, issues, capabilities_known=known)
    if entry is None:
        flow.add("warning", "dep", f"backend {name!r} is not known here")
    elif not entry.runnable:
        flow.add("warning", "dep", f"backend {name!r} is {entry.status} ({entry.definition.hint or entry.definition.note})")
    return flow
