"""What a run's flow needs installed and at hand: the planning detector's model and package
when the pipeline reads planning masks, and the reward (built once, then closed)."""

from __future__ import annotations

from retrain.config.validate.preflight import Preflight
from retrain.registry.health import module_available


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
                                      "(pip install 'retrain-core[semantic]')")
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
