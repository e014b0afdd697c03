"""Plugins: every dotted selector in the config must import (the reference checked syntax
only and failed later, mid-run). A custom reward whose module imports but lacks the function
is blamed on `custom_function`, one whose module does not import on `custom_module`."""

from __future__ import annotations

from retrain.config.errors import ConfigIssue, did_you_mean
from retrain.config.schema import TrainConfig
from retrain.plugins.resolve import MissingAttribute, PluginError, is_dotted, resolve


def dotted_selectors(c: TrainConfig) -> list[tuple[str, str]]:
    """(label, value) of every selector that is a dotted plugin path."""
    a = c.algorithm
    candidates = [
        ("[algorithm] algorithm_mode", a.algorithm_mode),
        ("[algorithm] advantage_mode", a.advantage_mode),
        ("[algorithm] transform_mode", a.transform_mode),
        ("[algorithm] uncertainty_kind", a.uncertainty_kind),
        ("[backend] backend", c.backend.backend),
        ("[reward] type", c.reward.type),
        ("[planning] detector", c.planning.detector),
        ("[data] source", c.data.source),
        ("[training] trainer", c.training.trainer),
        ("[training] policy_loss_mode", c.training.policy_loss_mode),
        *(("[logging] trackers", name) for name in c.logging.trackers),
    ]
    if a.algorithm_mode:
        candidates = [x for x in candidates if x[0] not in ("[algorithm] advantage_mode", "[algorithm] transform_mode")]
    return [(label, v) for label, v in candidates if v and is_dotted(v)]


def check_plugins(c: TrainConfig) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    for label, value in dotted_selectors(c):
        try:
            resolve(value, c.plugins.search_paths)
        except PluginError as exc:
            issues.append(ConfigIssue(f"plugin {value!r} does not import: {exc}", key=label))
    if c.reward.type == "custom" and c.reward.custom_module:
        target = f"{c.reward.custom_module}.{c.reward.custom_function}"
        try:
            resolve(target, c.plugins.search_paths)
        except MissingAttribute as exc:
            issues.append(ConfigIssue(f"module {exc.module!r} has no function {exc.attr!r}",
                                      key="[reward] custom_function", hint=did_you_mean(exc.attr, exc.names)))
        except PluginError as exc:
            issues.append(ConfigIssue(f"custom reward {target!r} does not import: {exc}",
                                      key="[reward] custom_module"))
    return issues
