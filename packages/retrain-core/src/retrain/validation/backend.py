"""The backend: its catalog entry, its options, and what its declared capabilities allow.

Every rule that depends on the backend asks its `BackendCapabilities` (retrain.backends.catalog),
never its name: a plugin backend is judged by what it declares, with the catalog's defaults for
what it leaves out, and an unknown name gets those defaults too (its own error says it is unknown).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from retrain.backends import catalog
from retrain.backends.catalog import BackendCapabilities
from retrain.backends.options import normalize_options
from retrain.config.errors import ConfigIssue
from retrain.config.fields import FieldSpec, all_fields, get_value
from retrain.config.schema import TrainConfig
from retrain.plugins.resolve import is_dotted
from retrain.validation.mode import available_hint
from retrain.validation.objective import objective_in

_TRUE = ("true", "1", "yes", "on")
#: what a backend declaring `service_settings` reads: a service's address and rate limits
SERVICE_SETTINGS = ("model.base_url", "backend.throttle_dir", "backend.max_concurrent")


@cache
def by_dotted() -> dict[str, FieldSpec]:
    return {spec.dotted: spec for spec in all_fields()}


def backend_entry(c: TrainConfig) -> catalog.BackendEntry | None:
    """The catalog entry of `[backend] backend` (a dotted path's reads its hooks), or None when
    the name is unknown."""
    name = c.backend.backend
    if is_dotted(name):
        return catalog.dotted_plugin_entry(name, dict(c.backend.options))
    return catalog.lookup(name)


def capabilities_of(entry: catalog.BackendEntry | None) -> BackendCapabilities:
    return entry.definition.capabilities if entry is not None else catalog.PLUGIN_DEFAULT_CAPABILITIES


def backend_capabilities(c: TrainConfig) -> BackendCapabilities:
    """What the configured backend declares it can do (the plugin defaults when unknown)."""
    return capabilities_of(backend_entry(c))


def backends_with(flag: str | Callable[[BackendCapabilities], bool]) -> list[str]:
    """Installed backends that declare the capability `flag` (or pass that test), in catalog
    order, for messages that name them."""
    test = flag if callable(flag) else (lambda caps: bool(getattr(caps, flag)))
    return [e.name for e in catalog.all_entries() if e.installed and test(e.definition.capabilities)]


def listed(names: list[str], last: str = "or") -> str:
    """`a, b or c`."""
    return f"{', '.join(names[:-1])} {last} {names[-1]}" if len(names) > 1 else "".join(names)


def or_backend(flag: str | Callable[[BackendCapabilities], bool], sep: str = ", or ") -> str:
    """`, or backend = "<the first installed backend that can>"`; "" when none here can."""
    names = backends_with(flag)
    return f'{sep}backend = "{names[0]}"' if names else ""


def check_backend(c: TrainConfig, entry: catalog.BackendEntry | None) -> tuple[dict[str, Any], list[ConfigIssue]]:
    """The options filled with the schema's defaults (as written when they do not validate), and
    the issues: an unknown name, the options, the backend's own rules, what it computes."""
    b = c.backend
    options = dict(b.options)
    if entry is None:  # a dotted path always has an entry
        known = [*catalog.BUILTIN_BACKENDS, *catalog.entry_point_names()]
        return options, [ConfigIssue(f"unknown backend {b.backend!r}", key="[backend] backend",
                                     hint=available_hint(b.backend, _runnable(known), guesses=known))]
    if not entry.installed and entry.source == "builtin":
        return options, []  # its facts ship with its distribution; dependency_warnings names it
    caps = entry.definition.capabilities
    options = implied_precision(options, caps.exclusive_precisions)
    normalized, issues = normalize_options(b.backend, options, entry.definition.option_schema)
    if not issues:
        options = normalized
        issues += _option_rules(b.backend, options, caps, c)
        issues += _service_rules(b.backend, caps, c)
        issues += _precision_rule(options, caps)
    issues += _computed(b.backend, caps, c)
    return options, issues


def _runnable(names: list[str]) -> list[str]:
    """Backend names that are built (whether or not their distribution is installed here)."""
    return [n for n in dict.fromkeys(names) if (e := catalog.lookup(n)) is not None and e.definition.available]


def implied_precision(options: dict[str, Any], precisions: tuple[str, ...]) -> dict[str, Any]:
    """Choosing another loading precision implies not the first (the default) unless that one
    is set explicitly.

    The reference defaulted load_in_4bit to true and then rejected two precisions, so
    `load_in_8bit = true` alone was an error; we read it as the user meant.
    """
    if not precisions:
        return options
    first, *others = precisions
    wants_other = any(str(options.get(k, "")).lower() in _TRUE for k in others)
    if wants_other and first not in options:
        return {**options, first: False}
    return options


def _option_rules(backend: str, options: dict[str, Any], caps: BackendCapabilities,
                  c: TrainConfig) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    for key in caps.seeded_options:
        if options.get(key) and c.training.seed == -1:
            issues.append(ConfigIssue(f"{key} needs a seed", key=f"[backend.options] {key}",
                                      hint="[training] seed = 42"))
    if caps.strict_advantages and options.get("strict_advantages") is False:
        issues.append(ConfigIssue(f"{backend} needs strict_advantages = true (it trains on one advantage per "
                                  "completion)", key="[backend.options] strict_advantages"))
    return issues


def _service_rules(backend: str, caps: BackendCapabilities, c: TrainConfig) -> list[ConfigIssue]:
    """The settings the backend declares it cannot honour; the service settings (a service's
    address and rate limits) unless it reads them."""
    refused = [ConfigIssue(f"cannot be set with backend = \"{backend}\": {r.why}", key=spec.label, hint=r.hint)
               for r in caps.refused_settings
               if (spec := by_dotted().get(r.key)) is not None and get_value(c, spec) != spec.default]
    refused += [ConfigIssue(f"backend {backend!r} declares a refused setting {r.key!r} that is no config key",
                            key="[backend] backend", hint="a key as section.key, e.g. training.min_p")
                for r in caps.refused_settings if r.key not in by_dotted()]
    if caps.service_settings:
        return refused
    readers = " or ".join(f'backend = "{n}"' for n in backends_with("service_settings")) or "a service backend"
    return refused + [ConfigIssue(f"is read only by {readers} (this config trains on {backend!r})", key=spec.label,
                                  hint="remove it")
                      for spec in map(by_dotted().__getitem__, SERVICE_SETTINGS) if get_value(c, spec) != spec.default]


def _precision_rule(options: dict[str, Any], caps: BackendCapabilities) -> list[ConfigIssue]:
    chosen = [k for k in caps.exclusive_precisions if options.get(k)]
    if len(chosen) > 1:
        return [ConfigIssue(f"choose one precision, got {', '.join(chosen)}", key=f"[backend.options] {caps.exclusive_precisions[0]}")]
    return []


def _computed(backend: str, caps: BackendCapabilities, c: TrainConfig) -> list[ConfigIssue]:
    """The loss aggregation, policy loss, ratio level and reference KL the backend computes."""
    t = c.training
    issues: list[ConfigIssue] = []
    if (aggregation := t.loss_aggregation) not in caps.loss_aggregations:
        issues.append(ConfigIssue(
            f"{aggregation!r} is not built yet for backend {backend!r} (it computes "
            f"{', '.join(caps.loss_aggregations)})",
            key="[training] loss_aggregation",
            hint='loss_aggregation = "token_mean"' + or_backend(lambda k: aggregation in k.loss_aggregations, " or ")))
    mode = t.policy_loss_mode
    if mode not in caps.policy_losses and not caps.tensor_objectives and objective_in(c) is not None:
        issues.append(ConfigIssue(
            f"{mode!r} is not built yet for backend {backend!r} (it computes {', '.join(caps.policy_losses)})",
            key="[training] policy_loss_mode",
            hint='policy_loss_mode = "standard"' + or_backend(lambda k: mode in k.policy_losses or k.tensor_objectives)))
    if (level := t.importance_sampling_level) not in caps.ratio_levels:
        issues.append(ConfigIssue(
            f"{level!r} ratios are not built yet for backend {backend!r} (it computes "
            f"{', '.join(caps.ratio_levels)} ratios)", key="[training] importance_sampling_level",
            hint='importance_sampling_level = "token"' + or_backend(lambda k: level in k.ratio_levels)))
    if t.kl_coef > 0 and not caps.reference_kl:
        issues.append(ConfigIssue(
            f"the KL penalty to the reference policy is not available on backend {backend!r} (it cannot "
            f"compute the reference's logprobs)", key="[training] kl_coef",
            hint="kl_coef = 0.0" + or_backend("reference_kl")))
    return issues
