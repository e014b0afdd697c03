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
from retrain.config.validate.built import NOT_BUILT_TEXT, live_values
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


def check_several_devices(c: TrainConfig, devices: list[str]) -> list[ConfigIssue]:
    """`devices` with N entries trains one policy on N processes (torchrun, FSDP2), one per
    entry: what that combines with so far."""
    key, issues = "[backend] devices", []
    one = 'one device, e.g. devices = "gpu:0"'
    if c.backend.backend != "local":
        issues.append(ConfigIssue(f"training on several devices with backend {c.backend.backend!r} is {NOT_BUILT_TEXT}",
                                  key=key, hint=f'{one}, or backend = "local"'))
    if len({d == "cpu" for d in devices}) > 1:
        issues.append(ConfigIssue(f"mixes the CPU and GPUs ({', '.join(devices)})", key=key,
                                  hint='all "cpu" or all gpu:N'))
    gpus = [d for d in devices if d != "cpu"]
    if len(set(gpus)) < len(gpus):
        issues.append(ConfigIssue(f"lists a GPU twice ({', '.join(devices)}); each training process needs its own",
                                  key=key, hint='distinct GPUs, e.g. devices = "gpu:0,gpu:1"'))
    several = f"with {len(devices)} devices is {NOT_BUILT_TEXT}"
    if c.inference.engine != "pytorch":
        issues.append(ConfigIssue(f"engine = {c.inference.engine!r} {several}", key="[inference] engine",
                                  hint=f'engine = "pytorch", or {one} (docs/scaling.md)'))
    if c.training.max_async_level > 0:
        issues.append(ConfigIssue(f"max_async_level = {c.training.max_async_level} {several}",
                                  key="[training] max_async_level", hint="max_async_level = 0"))
    if c.training.policy_loss_mode in ("kl_cov", "clip_cov"):
        issues.append(ConfigIssue(f"policy_loss_mode = {c.training.policy_loss_mode!r} {several} (its token "
                                  "selection spans the whole batch)", key="[training] policy_loss_mode",
                                  hint=f'policy_loss_mode = "standard", or {one}'))
    if c.training.trainer != "retrain":
        issues.append(ConfigIssue(f"trainer = {c.training.trainer!r} {several}", key="[training] trainer",
                                  hint=f'trainer = "retrain", or {one}'))
    if c.training.kl_coef > 0:
        issues.append(ConfigIssue(f"kl_coef = {c.training.kl_coef} {several}", key="[training] kl_coef",
                                  hint=f"kl_coef = 0, or {one}"))
    if c.environment.provider:
        issues.append(ConfigIssue(f"provider = {c.environment.provider!r} {several}", key="[environment] provider",
                                  hint=f"the built-in data sources, or {one}"))
    return issues


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
    if len(devices) > 1 and not issues:
        issues += check_several_devices(c, devices)

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
        caps = entry.definition.capabilities
        if (mode := c.training.policy_loss_mode) not in caps.policy_losses:
            issues.append(ConfigIssue(
                f"{mode!r} is not built yet for backend {b.backend!r} (it computes {', '.join(caps.policy_losses)})",
                key="[training] policy_loss_mode", hint='policy_loss_mode = "standard", or backend = "local"'))
        if (level := c.training.importance_sampling_level) not in caps.ratio_levels:
            issues.append(ConfigIssue(
                f"{level!r} ratios are not built yet for backend {b.backend!r} (it computes "
                f"{', '.join(caps.ratio_levels)} ratios)", key="[training] importance_sampling_level",
                hint='importance_sampling_level = "token", or backend = "local"'))
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
        if env.provider != "verifiers" and env.max_episode_tokens:
            issues.append(ConfigIssue("caps the tokens of a verifiers multi-turn episode; the OpenEnv provider's "
                                      "limit is args.context_window", key="[environment] max_episode_tokens",
                                      hint="args = {context_window = N}" if env.provider == "openenv" else "remove it"))
        if env.provider == "verifiers" and env.rollout_buffer_size != 0:
            issues.append(ConfigIssue(f"{NOT_BUILT_TEXT}: a rollout buffer for verifiers environments (episodes "
                                      "in flight are bounded by rollout_env_workers)",
                                      key="[environment] rollout_buffer_size", hint="remove it"))
    else:
        default = type(env)()
        for key in ("id", "args", "max_turns", "max_episode_tokens", "rollout_env_workers", "rollout_buffer_size"):
            if getattr(env, key) != getattr(default, key):
                issues.append(ConfigIssue("has no effect without [environment] provider", key=f"[environment] {key}",
                                          hint='provider = "verifiers" or "openenv", or remove it'))
    if c.echo.enabled and env.provider != "openenv":
        issues.append(ConfigIssue("ECHO trains on the observation tokens of multi-turn episodes, which only "
                                  "the OpenEnv provider produces in this version", key="[echo] enabled",
                                  hint='[environment] provider = "openenv"'))

    t = c.training
    if t.tl_grpo and env.provider != "openenv":
        issues.append(ConfigIssue("TL-GRPO scores alternative actions by replaying an episode in a fresh session, "
                                  "which only an OpenEnv environment allows (reset with the episode's seed)",
                                  key="[training] tl_grpo", hint='[environment] provider = "openenv"'))
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
    if backend == "tinker":
        issues += _tinker_rules(c)
    else:
        b, defaults = c.backend, TrainConfig()
        for key, value, default in (("[model] base_url", c.model.base_url, defaults.model.base_url),
                                    ("[backend] throttle_dir", b.throttle_dir, defaults.backend.throttle_dir),
                                    ("[backend] max_concurrent", b.max_concurrent, defaults.backend.max_concurrent)):
            if value != default:
                issues.append(ConfigIssue(f"is read only by backend = \"tinker\" (this config trains on {backend!r})",
                                          key=key, hint="remove it"))
    if backend == "unsloth":
        chosen = [k for k in ("load_in_4bit", "load_in_8bit", "load_in_16bit") if options.get(k)]
        if len(chosen) > 1:
            issues.append(ConfigIssue(f"choose one precision, got {', '.join(chosen)}",
                                      key="[backend.options] load_in_4bit"))
    return issues


__all__ = ["check_runtime", "entry_point_names"]


def _tinker_rules(c: TrainConfig) -> list[ConfigIssue]:
    """Settings the Tinker service cannot honour: it samples and computes the loss itself."""
    t, defaults = c.training, TrainConfig()
    refused = (
        ("[inference] engine", c.inference.engine, defaults.inference.engine,
         "the service samples; inference engines serve the local backend", "remove it"),
        ("[inference] importance_sampling_correction", c.inference.importance_sampling_correction, False,
         "the sampler-mismatch correction is built for the local backend only", "remove it"),
        ("[training] min_p", t.min_p, defaults.training.min_p,
         "the Tinker sampler has no min_p", "remove it; top_p and top_k work"),
        ("[training] clip_ratio_c", t.clip_ratio_c, defaults.training.clip_ratio_c,
         "Tinker's ppo loss has no dual clip", "remove it"),
        ("[lora] alpha", c.lora.alpha, defaults.lora.alpha,
         "the service chooses LoRA alpha", "remove it; [model] lora_rank sets the rank"),
        ("[lora] dropout", c.lora.dropout, defaults.lora.dropout,
         "the service trains without LoRA dropout", "remove it"),
    )
    return [ConfigIssue(f"cannot be set with backend = \"tinker\": {why}", key=key, hint=hint)
            for key, value, default, why, hint in refused if value != default]
