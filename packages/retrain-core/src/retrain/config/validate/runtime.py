"""Runtime compatibility: backend and its options, environment, devices, engines, rewards."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import msgspec

from retrain.backends import catalog
from retrain.backends.options import normalize_options
from retrain.config.errors import ConfigIssue
from retrain.config.fields import parse_devices
from retrain.config.schema import TrainConfig
from retrain.config.validate.built import live_values
from retrain.config.validate.mode import available_hint, check_selector
from retrain.plugins.resolve import is_dotted
from retrain.registry import builtin
from retrain.registry.entry_points import names as entry_point_names


def check_device(spec: str) -> str | None:
    if spec == "cpu":
        return None
    if spec.startswith("gpu:") and spec[4:].isdigit():
        return None
    return f"{spec!r} is not a device (use cpu or gpu:N)"


def check_runtime(c: TrainConfig) -> tuple[TrainConfig, list[ConfigIssue]]:
    issues: list[ConfigIssue] = []
    b = c.backend
    if c.model.local_files_only and not c.model.revision:
        issues.append(ConfigIssue("needs [model] revision", key="[model] local_files_only"))
    if not c.model.model.strip():
        issues.append(ConfigIssue("must not be empty", key="[model] model", hint='model = "tiny"'))
    if any(not p.strip() for p in c.plugins.search_paths):
        issues.append(ConfigIssue("entries must be non-empty", key="[plugins] search_paths"))

    devices = parse_devices(b.devices)
    if not devices:
        issues.append(ConfigIssue("must list at least one device", key="[backend] devices", hint='devices = "cpu"'))
    for d in devices:
        if device_problem := check_device(d):
            issues.append(ConfigIssue(device_problem, key="[backend] devices", hint='devices = "gpu:0" or "cpu"'))

    options = dict(b.options)
    entry = None
    if is_dotted(b.backend):
        entry = catalog.dotted_plugin_entry(b.backend, options)
    else:
        entry = catalog.lookup(b.backend)
        if entry is None:
            known = [*catalog.BUILTIN_BACKENDS, *catalog.entry_point_names()]
            issues.append(ConfigIssue(f"unknown backend {b.backend!r}", key="[backend] backend",
                                      hint=available_hint(b.backend, _runnable(known), guesses=known)))
    if entry is not None:
        schema = entry.definition.option_schema
        if b.backend == "unsloth":
            options = _unsloth_precision(options)
        normalized, option_issues = normalize_options(b.backend, options, schema)
        issues += option_issues
        if not option_issues:
            options = normalized
            issues += _backend_rules(b.backend, options, c)
        if (aggregation := c.training.loss_aggregation) not in entry.definition.capabilities.loss_aggregations:
            issues.append(ConfigIssue(
                f"{aggregation!r} is not built yet for backend {b.backend!r} (it computes "
                f"{', '.join(entry.definition.capabilities.loss_aggregations)})",
                key="[training] loss_aggregation", hint='loss_aggregation = "token_mean" or backend = "local"'))
        if c.training.kl_coef > 0 and not entry.definition.capabilities.reference_kl:
            issues.append(ConfigIssue(
                f"the KL penalty to the reference policy is not available on backend {b.backend!r} (it cannot "
                f"compute the reference's logprobs)", key="[training] kl_coef",
                hint='kl_coef = 0.0, or backend = "local"'))

    env = c.environment
    if env.provider:
        if problem := check_selector(env.provider, builtin.ENVIRONMENT_PROVIDERS,
                                     builtin.ENTRY_POINT_GROUPS["environment"],
                                     "[environment] provider", "environment provider"):
            issues.append(problem)
        if not env.id:
            issues.append(ConfigIssue("required when [environment] provider is set", key="[environment] id"))
        elif env.provider == "openenv" and urlparse(env.id).scheme not in ("http", "https", "ws", "wss"):
            issues.append(ConfigIssue(f"{env.id!r} must be an http(s):// or ws(s):// URL for openenv",
                                      key="[environment] id"))

    t = c.training
    if t.trainer not in builtin.TRAINERS and not is_dotted(t.trainer):
        issues.append(ConfigIssue(f"unknown trainer {t.trainer!r}", key="[training] trainer",
                                  hint=available_hint(t.trainer, live_values("training.trainer", builtin.TRAINERS),
                                                      guesses=builtin.TRAINERS, dotted=False)))
    engine = c.inference.engine
    if engine not in builtin.INFERENCE_ENGINES:
        issues.append(ConfigIssue(f"unknown inference engine {engine!r}", key="[inference] engine",
                                  hint=available_hint(engine, live_values("inference.engine", builtin.INFERENCE_ENGINES),
                                                     guesses=builtin.INFERENCE_ENGINES, dotted=False)))
    for value, names, kind, key in (
        (c.reward.type, builtin.REWARDS, "reward", "[reward] type"),
        (c.planning.detector, builtin.PLANNING_DETECTORS, "planning_detector", "[planning] detector"),
        (c.data.source, builtin.DATA_SOURCES, "data_source", "[data] source"),
    ):
        if problem := check_selector(value, names, builtin.ENTRY_POINT_GROUPS[kind], key, kind.replace("_", " ")):
            issues.append(problem)
    if c.reward.type == "custom" and not c.reward.custom_module:
        issues.append(ConfigIssue("type = custom needs custom_module", key="[reward] custom_module",
                                  hint='custom_module = "my_rewards"'))
    if c.algorithm.uncertainty_kind == "shannon_entropy" and (engine != "pytorch" or b.backend == "tinker"):
        here = [k for k in builtin.UNCERTAINTY_KINDS if k != "shannon_entropy"]
        issues.append(ConfigIssue(
            "shannon_entropy needs the pytorch inference engine on a non-tinker backend "
            "(full token distributions)", key="[algorithm] uncertainty_kind",
            hint=f"available here: {', '.join(here)}; or a dotted path"))
    backend = msgspec.structs.replace(b, options=options)
    return msgspec.structs.replace(c, backend=backend), issues


def _runnable(names: list[str]) -> list[str]:
    """Backend names that are built (whether or not their distribution is installed here)."""
    return [n for n in dict.fromkeys(names) if (e := catalog.lookup(n)) is not None and e.definition.available]


def _unsloth_precision(options: dict[str, Any]) -> dict[str, Any]:
    """Choosing 8- or 16-bit loading implies not 4-bit unless 4-bit is set explicitly.

    The reference defaulted load_in_4bit to true and then rejected two precisions, so
    `load_in_8bit = true` alone was an error; we read it as the user meant.
    """
    wants_other = any(str(options.get(k, "")).lower() in ("true", "1", "yes", "on")
                      for k in ("load_in_8bit", "load_in_16bit"))
    if wants_other and "load_in_4bit" not in options:
        return {**options, "load_in_4bit": False}
    return options


def _backend_rules(backend: str, options: dict[str, Any], c: TrainConfig) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    if backend == "local" and options.get("strict_deterministic") and c.training.seed == -1:
        issues.append(ConfigIssue("strict_deterministic needs a seed", key="[backend.options] strict_deterministic",
                                  hint="[training] seed = 42"))
    if backend == "prime_rl" and options.get("strict_advantages") is False:
        issues.append(ConfigIssue("prime_rl needs strict_advantages = true (it trains on one advantage per completion)",
                                  key="[backend.options] strict_advantages"))
    if backend == "unsloth":
        chosen = [k for k in ("load_in_4bit", "load_in_8bit", "load_in_16bit") if options.get(k)]
        if len(chosen) > 1:
            issues.append(ConfigIssue(f"choose one precision, got {', '.join(chosen)}",
                                      key="[backend.options] load_in_4bit"))
    return issues


__all__ = ["check_runtime", "entry_point_names"]
