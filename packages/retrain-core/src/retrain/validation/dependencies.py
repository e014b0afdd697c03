"""What a run needs installed and at hand. `dependency_warnings`: the configured backend's
distribution and the packages of the chosen components, found without importing them (for
`retrain explain`). `check_dependencies`, in the preflight: the planning detector's model and
package when the pipeline reads planning masks, and the reward (built once, then closed)."""

from __future__ import annotations

from retrain.backends import catalog
from retrain.config.schema import TrainConfig
from retrain.plugins.resolve import is_dotted
from retrain.registry import builtin
from retrain.registry.health import COMPONENTS, module_available
from retrain.validation.preflight import Preflight


def check_dependencies(flow: Preflight) -> None:
    _planning(flow)
    _reward(flow)


def _planning(flow: Preflight) -> None:
    c, p = flow.config, flow.pipeline
    if p is None or not p.needs_planning or c.planning.detector != "semantic":
        return
    from retrain.planning.semantic import model_folder
    from retrain.planning.types import PlanningUnavailable

    try:
        if not module_available("sentence_transformers"):
            raise PlanningUnavailable("[planning] detector = semantic needs 'sentence-transformers' "
                                      f"({COMPONENTS['semantic'].hint})")
        model_folder(c.planning.model)
    except PlanningUnavailable as exc:
        flow.add("error", "dep", f"{p.condition} needs planning masks: {exc}")


def _reward(flow: Preflight) -> None:
    c = flow.config
    if c.environment.provider or not c.is_rl:
        return
    from retrain.rewards.create import build_reward

    try:
        build_reward(c).close()
    except Exception as exc:
        flow.add("error", "dep", f"reward {c.reward.type!r}: {exc}")


def dependency_warnings(config: TrainConfig) -> list[str]:
    """What the configured components need that this machine lacks, one line each."""
    out: list[str] = []
    backend = config.backend.backend
    if not is_dotted(backend):
        entry = catalog.lookup(backend)
        if entry is not None and not entry.installed:
            out.append(f"backend {backend!r} needs {entry.definition.distribution}: {entry.definition.hint}")
        elif entry is not None and not entry.definition.available:
            out.append(f"backend {backend!r}: {entry.definition.note or 'not built yet in this version'}")
    needs = []
    if config.reward.type == "math":
        needs.append(("reward type 'math'", COMPONENTS["math"]))
    if config.planning.detector == "semantic":
        needs.append(("planning detector 'semantic'", COMPONENTS["semantic"]))
    provider = config.environment.provider
    if provider in builtin.ENVIRONMENT_PROVIDERS:  # a built-in provider: COMPONENTS says what it imports
        needs.append((f"environment provider {provider!r}", COMPONENTS[provider]))
    for tracker in config.logging.tracker_names():
        if tracker in builtin.TRACKERS:
            needs.append((f"tracker {tracker!r}", COMPONENTS[tracker]))
    for what, comp in needs:
        if not comp.available:
            out.append(f"{what} needs {comp.module!r}: {comp.hint}")
    return out
