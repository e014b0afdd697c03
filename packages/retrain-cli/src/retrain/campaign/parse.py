"""`[campaign]` files: the table's settings and the conditions, each validated on top of the
file's base sections (the reference validated conditions against bare defaults)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from retrain.config.errors import ConfigError, ConfigIssue, did_you_mean
from retrain.config.fields import CoerceError, by_flat, coerce, with_values
from retrain.config.override import Overrides
from retrain.config.schema import CampaignConfig, TrainConfig
from retrain.config.source import TomlSource
from retrain.io.http import check_url
from retrain.validation import validate
from retrain.validation.load import LoadedConfig, locate

DEFAULT_CONDITIONS: tuple[tuple[str, str], ...] = (
    ("grpo", "none"),
    ("maxrl", "none"),
    ("maxrl", "gtpo"),
    ("maxrl", "gtpo_hicra"),
    ("maxrl", "gtpo_sepa"),
)
_SEED_MAX = 4294967295


@dataclass
class Condition:
    label: str
    advantage_mode: str
    transform_mode: str
    overrides: dict[str, Any]
    config: TrainConfig


@dataclass
class CampaignPlan:
    settings: CampaignConfig
    base: TrainConfig
    conditions: list[Condition]
    max_steps: int
    warnings: list[ConfigIssue] = field(default_factory=list)

    @property
    def total_runs(self) -> int:
        return len(self.conditions) * len(self.settings.seeds)


def ray_address_problem(address: str) -> str | None:
    """None for "", "auto", a Ray client URL (ray://HOST:PORT) or a cluster's HOST:PORT;
    else what is wrong with it (`retrain.io.http.check_url`'s words)."""
    if address in ("", "auto"):
        return None
    return check_url(address if "://" in address else "ray://" + address, ("ray",))


def condition_label(advantage_mode: str, transform_mode: str, overrides: dict[str, Any]) -> str:
    label = f"{advantage_mode}+{transform_mode}"
    if overrides:
        label += "~" + ",".join(f"{k}={overrides[k]}" for k in sorted(overrides))
    return label


def parse_campaign(source: TomlSource, base: LoadedConfig) -> CampaignPlan:
    table = source.data.get("campaign", {})
    issues: list[ConfigIssue] = []
    known = {f.encode_name for f in msgspec.inspect.type_info(CampaignConfig).fields}  # type: ignore[attr-defined]
    for key in table:
        if key not in known:
            issues.append(ConfigIssue("unknown key", key=f"[campaign] {key}", hint=did_you_mean(key, known)))
    try:
        settings = msgspec.convert({k: v for k, v in table.items() if k in known}, CampaignConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(locate([ConfigIssue(str(exc), key="[campaign]")], source, Overrides())) from None
    for seed in settings.seeds:
        if not -1 <= seed <= _SEED_MAX:
            issues.append(ConfigIssue(f"seed {seed} must be in [-1, {_SEED_MAX}]", key="[campaign] seeds"))
    if problem := ray_address_problem(settings.ray_address):
        issues.append(ConfigIssue(f"{settings.ray_address!r} {problem}", key="[campaign] ray_address",
                                  hint='"auto", "ray://HOST:10001" or "HOST:6379"; empty starts a local Ray instance'))
    max_steps = settings.max_steps or base.config.training.max_steps
    raw_conditions = settings.conditions or [
        {"advantage_mode": a, "transform_mode": t} for a, t in DEFAULT_CONDITIONS
    ]
    conditions = []
    for index, raw in enumerate(raw_conditions):
        cond, cond_issues = _condition(index, raw, base.config)
        issues += cond_issues
        if cond is not None:
            conditions.append(cond)
    labels = [c.label for c in conditions]
    for label in {x for x in labels if labels.count(x) > 1}:
        issues.append(ConfigIssue(f"two conditions share the label {label!r}", key="[[campaign.conditions]]"))
    if issues:
        raise ConfigError(locate(issues, source, Overrides()))
    return CampaignPlan(settings, base.config, conditions, max_steps, base.warnings)


def _condition(index: int, raw: dict[str, Any], base: TrainConfig) -> tuple[Condition | None, list[ConfigIssue]]:
    where = f"[[campaign.conditions]] #{index + 1}"
    issues: list[ConfigIssue] = []
    adv, transform = raw.get("advantage_mode"), raw.get("transform_mode")
    for name, value in (("advantage_mode", adv), ("transform_mode", transform)):
        if not isinstance(value, str) or not value:
            issues.append(ConfigIssue("required, a non-empty string", key=f"{where} {name}"))
    overrides = {k: v for k, v in raw.items() if k not in ("advantage_mode", "transform_mode")}
    values = {}
    specs = by_flat()
    for key, value in overrides.items():
        spec = specs.get(key)
        if spec is None:
            issues.append(ConfigIssue("unknown field", key=f"{where} {key}",
                                      hint=did_you_mean(key, specs) or "condition keys are field names such as lr or adv_clip_max"))
            continue
        try:
            values[spec] = coerce(spec.type, value)
        except CoerceError as exc:
            issues.append(ConfigIssue(f"{value!r}: {exc}", key=f"{where} {key}"))
    if issues:
        return None, issues
    assert isinstance(adv, str) and isinstance(transform, str)
    values[specs["advantage_mode"]] = adv
    values[specs["transform_mode"]] = transform
    config = with_values(base, values)
    config, errors, _ = validate(config)
    for e in errors:
        issues.append(ConfigIssue(e.message, key=f"{where} {e.key}", hint=e.hint))
    label = condition_label(adv, transform, overrides)
    return Condition(label, adv, transform, overrides, config), issues
