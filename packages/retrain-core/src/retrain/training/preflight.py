"""The preflight trace of a run's flow (`retrain trace`; a trainer may run it at start).

`build_preflight(config)` resolves what a run would use without touching a GPU or importing
torch: the advantage pipeline, the backend's capabilities (from the catalog), the reward and
the planning detector's dependency. `trace(config)` then checks them against each other and
runs the pipeline on fixed synthetic groups (the probes), reporting issues as error or
warning in four categories: compat (backend vs algorithm), probe (the pipeline on the
synthetic groups), dep (missing packages) and config (settings that do nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from retrain.advantages.delight.transform import check_keys as check_delight_keys
from retrain.advantages.pipeline import AdvantagePipeline, build_pipeline
from retrain.advantages.transform import mask_rho
from retrain.backends import catalog
from retrain.config.schema import TrainConfig
from retrain.registry.builtin import DELIGHT_TRANSFORMS
from retrain.registry.health import module_available
from retrain.training.signals import SCALAR_TOLERANCE

Severity = Literal["error", "warning"]
Category = Literal["compat", "probe", "dep", "config"]


@dataclass(frozen=True)
class TraceIssue:
    severity: Severity
    category: Category
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"severity": self.severity, "category": self.category, "message": self.message}


@dataclass(frozen=True)
class ProbeCase:
    """A synthetic group; the edge case has an empty and a one-token completion."""

    name: str
    rewards: list[float]
    logprobs: list[list[float]]
    masks: list[list[int]]
    entropies: list[list[float]]
    sepa_lambda: float
    step: int


PROBE_CASES = (
    ProbeCase(
        "contrast",
        [1.0, 0.0],
        [[-0.3, -1.2, -2.5], [-0.8, -0.1, -1.7]],
        [[0, 1, 0], [1, 0, 0]],
        [[0.6, 1.1, 1.9], [0.9, 0.2, 1.4]],
        0.7,
        7,
    ),
    ProbeCase(
        "partial",
        [0.25, 0.75],
        [[-1.5, -0.05, -0.7], [-2.2, -0.4, -0.9]],
        [[0, 0, 1], [0, 1, 1]],
        [[1.3, 0.1, 0.8], [1.8, 0.6, 1.0]],
        0.35,
        29,
    ),
    ProbeCase(
        "ragged",
        [1.0, 0.0, 1.0],
        [[-0.2, -0.9], [], [-3.0]],
        [[1, 0], [], [0]],
        [[0.4, 0.9], [], [2.2]],
        0.5,
        0,
    ),
)


@dataclass
class Preflight:
    config: TrainConfig
    pipeline: AdvantagePipeline | None
    backend: str
    backend_source: str
    capabilities: catalog.BackendCapabilities
    backend_installed: bool = True
    issues: list[TraceIssue] = field(default_factory=list)

    @property
    def condition_label(self) -> str:
        a = self.config.algorithm
        label = a.algorithm_mode or f"{a.advantage_mode}+{a.transform_mode}"
        return label + ("+echo" if self.config.echo.enabled else "")

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


def _issue(issues: list[TraceIssue], severity: Severity, category: Category, message: str) -> None:
    issues.append(TraceIssue(severity, category, message))


def build_preflight(config: TrainConfig) -> Preflight:
    """Resolve the run's components; problems become issues instead of exceptions."""
    issues: list[TraceIssue] = []
    entry = catalog.entry_for(config.backend.backend, config.backend.options)
    caps = entry.definition.capabilities if entry else catalog.PLUGIN_DEFAULT_CAPABILITIES
    source = entry.source if entry else "unknown"
    installed = bool(entry and entry.installed)
    pipeline: AdvantagePipeline | None = None
    try:
        pipeline = build_pipeline(config)
    except Exception as exc:
        _issue(issues, "error", "config", f"advantage pipeline: {type(exc).__name__}: {exc}")
    flow = Preflight(config, pipeline, config.backend.backend, source, caps, installed, issues)
    if entry is None:
        _issue(issues, "warning", "dep", f"backend {config.backend.backend!r} is not known here")
    elif not entry.runnable:
        _issue(
            issues,
            "warning",
            "dep",
            f"backend {config.backend.backend!r} is {entry.status} "
            f"({entry.definition.hint or entry.definition.note})",
        )
    _check_components(flow)
    return flow


def _check_components(flow: Preflight) -> None:
    c, issues, p = flow.config, flow.issues, flow.pipeline
    if p is not None and p.needs_planning and c.planning.detector == "semantic":
        from retrain.planning.semantic import model_folder
        from retrain.planning.types import PlanningUnavailable

        try:
            if not module_available("sentence_transformers"):
                raise PlanningUnavailable("[planning] detector = semantic needs 'sentence-transformers' "
                                          "(pip install 'retrain-core[semantic]')")
            model_folder(c.planning.model)
        except PlanningUnavailable as exc:
            _issue(issues, "error", "dep", f"{p.condition} needs planning masks: {exc}")
    if not c.environment.provider and c.is_rl:
        from retrain.rewards.create import build_reward

        try:
            build_reward(c).close()
        except Exception as exc:
            _issue(issues, "error", "dep", f"reward {c.reward.type!r}: {exc}")


def _check_compat(flow: Preflight) -> None:
    c, issues, p, caps = flow.config, flow.issues, flow.pipeline, flow.capabilities
    if p is not None and p.token_varying and not caps.preserves_token_advantages:
        _issue(
            issues,
            "error",
            "compat",
            f"{p.condition} gives each token its own advantage, but backend {flow.backend!r} keeps "
            "one advantage per completion (preserves_token_advantages = false); use "
            'transform_mode = "none" (or algorithm_mode grpo_none / maxrl_none / reinforce_pp_none) '
            "or a token-preserving backend such as local, unsloth or tinker",
        )
    if c.echo.enabled:
        if not caps.preserves_token_advantages or not caps.supports_echo_shared_forward:
            _issue(
                issues,
                "error",
                "compat",
                f"[echo] needs a backend with token advantages and a shared forward pass; "
                f"{flow.backend!r} has neither (use local or unsloth)"
                if not caps.preserves_token_advantages
                else f"[echo] needs a shared forward pass; backend {flow.backend!r} lacks it (use local or unsloth)",
            )
        if c.environment.provider not in ("verifiers", "openenv"):
            _issue(
                issues,
                "warning",
                "config",
                "[echo] is enabled but no verifiers/openenv environment "
                "provides observation tokens; it will train nothing",
            )
    if (
        p is not None
        and p.uses_sepa_controller
        and c.sepa.schedule == "linear"
        and c.sepa.steps <= 0
        and "delight_lambda" not in p.params
    ):
        _issue(
            issues,
            "warning",
            "config",
            f"{p.condition} uses the SEPA controller but [sepa] steps = "
            f"{c.sepa.steps} with the linear schedule keeps lambda at 0 (no pooling)",
        )
    if not caps.reports_sync_loss:
        _issue(issues, "warning", "config", f"backend {flow.backend!r} reports a placeholder loss")
    if (
        p is not None
        and p.transform is not None
        and p.transform.name == "entropy_mask"
        and mask_rho(p.params) <= 0
    ):
        _issue(
            issues,
            "warning",
            "config",
            "entropy_mask with surprisal_mask_rho = 0 masks nothing "
            "(plain GTPO); set e.g. surprisal_mask_rho = 0.2 to keep the top 20% of tokens",
        )
    t = p.transform if p is not None else None
    if p is not None and t is not None and t.source == "builtin" and t.name not in DELIGHT_TRANSFORMS:
        # a Delight transform refuses these when the pipeline is built; the others read none
        read = sorted(k for k in p.params if k.startswith("delight"))
        try:
            check_delight_keys(p.params)
        except ValueError as exc:
            _issue(issues, "error", "config", f"[algorithm.transform_params]: {exc}")
        else:
            if read:
                _issue(
                    issues,
                    "warning",
                    "config",
                    f"[algorithm.transform_params] {', '.join(read)}: not read: transform {t.name!r} is "
                    f"not a Delight transform (live with transform_mode = "
                    f"{', '.join(DELIGHT_TRANSFORMS)})",
                )


def _run_probe(flow: Preflight, case: ProbeCase) -> bool:
    p = flow.pipeline
    assert p is not None
    try:
        result = p.compute_group(
            case.rewards,
            case.logprobs,
            planning_masks=case.masks,
            entropies=case.entropies,
            sepa_lambda=case.sepa_lambda,
            step=case.step,
        )
    except Exception as exc:
        _issue(flow.issues, "error", "probe", f"probe {case.name!r}: {type(exc).__name__}: {exc}")
        return False
    # A declared token-varying pipeline is already a compat error; this catches plugins that
    # declare one advantage per completion but vary anyway.
    if not flow.capabilities.preserves_token_advantages and not p.token_varying:
        spread = result.token_spread()
        if spread.size and float(spread.max()) > SCALAR_TOLERANCE:
            _issue(
                flow.issues,
                "error",
                "probe",
                f"probe {case.name!r}: token advantages vary within a completion (spread "
                f"{float(spread.max()):.3g}) on backend {flow.backend!r}, which keeps one per completion",
            )
            return False
    return True


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "probe_cases_run": self.probe_cases_run,
            "probe_cases_passed": self.probe_cases_passed,
            "issues": [i.to_dict() for i in self.issues],
            "flow": self.flow.to_dict(),
        }


def trace(config: TrainConfig) -> TraceReport:
    flow = build_preflight(config)
    _check_compat(flow)
    run = passed = 0
    if flow.pipeline is not None:
        for case in PROBE_CASES:
            run += 1
            passed += _run_probe(flow, case)
    return TraceReport(flow, run, passed)
