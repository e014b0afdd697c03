"""Runtime compatibility: model, devices, the backend (validate.backend), the environment
(validate.environment), trainer, engines, rewards and the other selectors."""

from __future__ import annotations

import msgspec

from retrain.backends.catalog import BackendCapabilities
from retrain.config.errors import ConfigIssue
from retrain.config.fields import parse_devices
from retrain.config.schema import TrainConfig
from retrain.plugins.resolve import is_dotted
from retrain.registry import builtin
from retrain.registry.entry_points import names as entry_point_names
from retrain.validation.backend import (
    backend_entry,
    backends_with,
    capabilities_of,
    check_backend,
    or_backend,
)
from retrain.validation.built import NOT_BUILT_TEXT, live_values
from retrain.validation.environment import check_environment
from retrain.validation.mode import available_hint, check_selector, runtime_names
from retrain.validation.objective import objective_in
from retrain.validation.urls import check_urls


def check_device(spec: str) -> str | None:
    if spec == "cpu":
        return None
    if spec.startswith("gpu:") and spec[4:].isdigit():
        return None
    return f"{spec!r} is not a device (use cpu or gpu:N)"


def check_several_devices(c: TrainConfig, devices: list[str], caps: BackendCapabilities) -> list[ConfigIssue]:
    """`devices` with N entries trains one policy on N processes (torchrun, FSDP2), one per
    entry: what that combines with so far."""
    key, issues = "[backend] devices", []
    one = 'one device, e.g. devices = "gpu:0"'
    if not caps.multi_device:
        issues.append(ConfigIssue(f"training on several devices with backend {c.backend.backend!r} is {NOT_BUILT_TEXT}",
                                  key=key, hint=one + or_backend("multi_device")))
    if len({d == "cpu" for d in devices}) > 1:
        issues.append(ConfigIssue(f"mixes the CPU and GPUs ({', '.join(devices)})", key=key,
                                  hint='all "cpu" or all gpu:N'))
    gpus = [d for d in devices if d != "cpu"]
    if len(set(gpus)) < len(gpus):
        issues.append(ConfigIssue(f"lists a GPU twice ({', '.join(devices)}); each training process needs its own",
                                  key=key, hint='distinct GPUs, e.g. devices = "gpu:0,gpu:1"'))
    return issues + several_processes(c, len(devices))


def several_processes(c: TrainConfig, n: int, *, torchrun: bool = False) -> list[ConfigIssue]:
    """Settings not built for one policy trained by `n` processes: refused when the config
    loads with `n` [backend] devices, and again when a run that torchrun started finds `n`
    processes (the local backend's placement, the RL trainer), in the same words."""
    t = c.training
    several = f"with {n} {'processes' if torchrun else 'devices'} is {NOT_BUILT_TEXT}"
    one = "one process" if torchrun else 'one device, e.g. devices = "gpu:0"'
    objective = objective_in(c)
    why = objective.several_processes_refusal() if objective is not None else None
    refused = (
        (t.max_async_level > 0 and c.inference.engine == "pytorch",
         f'max_async_level = {t.max_async_level} with engine = "pytorch" {several} (the processes sample together, '
         "in step with training)", "[training] max_async_level",
         'max_async_level = 0, or engine = "vllm" (docs/scaling.md)'),
        (c.inference.recompute_stale_logprobs and t.max_async_level > 0,
         f"recompute_stale_logprobs = true {several} (the older versions are held by rank 0 alone)",
         "[inference] recompute_stale_logprobs", f"recompute_stale_logprobs = false, or {one}"),
        (why is not None, f"policy_loss_mode = {t.policy_loss_mode!r} {several} ({why})", "[training] policy_loss_mode",
         f'policy_loss_mode = "standard", or {one}'),
        (t.trainer != "retrain", f"trainer = {t.trainer!r} {several} (only the RL loop runs on torchrun)",
         "[training] trainer", f'trainer = "retrain", or {one}'),
        (t.kl_coef > 0, f"kl_coef = {t.kl_coef} {several} (the reference policy is not built on FSDP2's sharded "
         "weights)", "[training] kl_coef", f"kl_coef = 0, or {one}"),
        (bool(c.environment.provider), f"provider = {c.environment.provider!r} {several} (an environment's "
         "episodes run in one process, not shared between ranks)", "[environment] provider",
         f"the built-in data sources, or {one}"),
    )
    return [ConfigIssue(message, key=key, hint=hint) for refuse, message, key, hint in refused if refuse]


def check_runtime(c: TrainConfig) -> tuple[TrainConfig, list[ConfigIssue]]:
    """Steps in the order their issues are reported: model, devices, backend, environment,
    selectors, URLs. Several devices are judged only once everything before them is clean."""
    entry = backend_entry(c)
    caps = capabilities_of(entry)
    issues = _model(c)
    issues += _devices(c, caps, clean=not issues)
    options, backend_issues = check_backend(c, entry)
    issues += backend_issues
    issues += check_environment(c)
    issues += _selectors(c, caps)
    issues += check_urls(c)
    backend = msgspec.structs.replace(c.backend, options=options)
    return msgspec.structs.replace(c, backend=backend), issues


def _model(c: TrainConfig) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    if c.model.local_files_only and not c.model.revision:
        issues.append(ConfigIssue("needs [model] revision", key="[model] local_files_only"))
    if not c.model.model.strip():
        issues.append(ConfigIssue("must not be empty", key="[model] model", hint='model = "tiny"'))
    if any(not p.strip() for p in c.plugins.search_paths):
        issues.append(ConfigIssue("entries must be non-empty", key="[plugins] search_paths"))
    return issues


def _devices(c: TrainConfig, caps: BackendCapabilities, *, clean: bool) -> list[ConfigIssue]:
    devices = parse_devices(c.backend.devices)
    issues: list[ConfigIssue] = []
    if not devices:
        issues.append(ConfigIssue("must list at least one device", key="[backend] devices", hint='devices = "cpu"'))
    for d in devices:
        if device_problem := check_device(d):
            issues.append(ConfigIssue(device_problem, key="[backend] devices", hint='devices = "gpu:0" or "cpu"'))
    if len(devices) > 1 and clean and not issues:
        issues += check_several_devices(c, devices, caps)
    return issues


def _selectors(c: TrainConfig, caps: BackendCapabilities) -> list[ConfigIssue]:
    """Trainer, inference engine, reward, planning detector, data source and uncertainty kind."""
    issues: list[ConfigIssue] = []
    t, engine = c.training, c.inference.engine
    registered = [*entry_point_names(builtin.ENTRY_POINT_GROUPS["trainer"]),
                  *runtime_names(builtin.ENTRY_POINT_GROUPS["trainer"])]
    if t.trainer not in builtin.TRAINERS and t.trainer not in registered and not is_dotted(t.trainer):
        known = [*live_values("training.trainer", builtin.TRAINERS), *registered]
        issues.append(ConfigIssue(f"unknown trainer {t.trainer!r}", key="[training] trainer",
                                  hint=available_hint(t.trainer, known, guesses=[*builtin.TRAINERS, *registered],
                                                      dotted=False)))
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
    if c.algorithm.uncertainty_kind == "shannon_entropy" and (engine != "pytorch" or not caps.full_token_distributions):
        here = [k for k in builtin.UNCERTAINTY_KINDS if k != "shannon_entropy"]
        issues.append(ConfigIssue(
            f"shannon_entropy needs the pytorch inference engine on a {_without_distributions()}backend "
            "(full token distributions)", key="[algorithm] uncertainty_kind",
            hint=f"available here: {', '.join(here)}; or a dotted path"))
    return issues


__all__ = ["check_runtime", "entry_point_names"]


def _without_distributions() -> str:
    """`non-<name> ` for the installed backends that see no full token distributions."""
    names = backends_with(lambda k: not k.full_token_distributions)
    return f"non-{'/'.join(names)} " if names else ""
