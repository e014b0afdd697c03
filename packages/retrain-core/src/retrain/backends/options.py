"""`[backend.options]`: the option schema a backend's definition declares, and its normalisation.

A normalised options table holds every schema key (defaults filled in) with its value coerced
to the declared type, so backends never re-parse strings. Unknown keys are errors. Each
backend's schema ships with its distribution (its `BackendDefinition.option_schema`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from retrain.config.errors import ConfigIssue, did_you_mean
from retrain.config.fields import CoerceError, coerce


@dataclass(frozen=True)
class OptionSpec:
    value_type: type
    default: Any
    choices: tuple[Any, ...] | None = None
    validator: Callable[[Any], str | None] | None = None
    description: str = ""
    # why the option does nothing when the run trains on the CPU ("" when it acts anywhere);
    # set away from its default on a CPU run it is warned about (retrain.validation.inert)
    cuda_only: str = ""


OptionSchema = Mapping[str, OptionSpec]


def ge0(v: Any) -> str | None:
    return None if v >= 0 else "must be >= 0"


def gt0(v: Any) -> str | None:
    return None if v > 0 else "must be > 0"


def unit(v: Any) -> str | None:
    return None if 0 < v <= 1 else "must be in (0, 1]"


#: Shorthands for schema entries (the built-in distributions' schemas use them; so may a plugin's).
def bool_option(default: bool, description: str = "") -> OptionSpec:
    return OptionSpec(bool, default, description=description)


def int_option(default: int, validator: Callable[[Any], str | None] | None = ge0, description: str = "",
               choices: tuple[Any, ...] | None = None) -> OptionSpec:
    return OptionSpec(int, default, choices=choices, validator=validator, description=description)


def str_option(default: str, choices: tuple[str, ...] | None = None, description: str = "") -> OptionSpec:
    return OptionSpec(str, default, choices=choices, description=description)


def normalize_options(
    backend: str, options: Mapping[str, Any], schema: OptionSchema | None
) -> tuple[dict[str, Any], list[ConfigIssue]]:
    """Every schema key with a coerced value, and the problems found (all of them).

    A backend with no schema (a plugin that declares none) gets its options untouched.
    """
    if schema is None:
        return dict(options), []
    issues: list[ConfigIssue] = []
    out = {k: spec.default for k, spec in schema.items()}
    for key in sorted(options):
        raw = options[key]
        label = f"[backend.options] {key}"
        spec = schema.get(key)
        if spec is None:
            if not schema:
                msg = f"backend {backend!r} takes no options"
                hint = "remove the [backend.options] table"
            else:
                msg = f"unknown option for backend {backend!r}"
                hint = did_you_mean(key, schema) or "see `retrain backends` for the option list"
            issues.append(ConfigIssue(msg, key=label, hint=hint))
            continue
        try:
            value = coerce(spec.value_type, raw)
        except CoerceError as exc:
            issues.append(ConfigIssue(f"{raw!r}: {exc}", key=label, hint=f"{key} = {_toml(spec.default)}"))
            continue
        if spec.choices is not None and value not in spec.choices:
            choices = ", ".join(map(str, spec.choices))
            issues.append(ConfigIssue(f"{raw!r}: must be one of {choices}", key=label,
                                      hint=did_you_mean(str(value), map(str, spec.choices))))
            continue
        if spec.validator is not None and (problem := spec.validator(value)):
            issues.append(ConfigIssue(f"{raw!r}: {problem}", key=label, hint=f"{key} = {_toml(spec.default)}"))
            continue
        out[key] = value
    return out, issues


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def describe_schema(schema: OptionSchema, unbuilt: Collection[str] = ()) -> dict[str, dict[str, Any]]:
    """Each option as data; `built` is false for the options named in `unbuilt` (refused as
    not built yet: retrain.validation.built)."""
    return {
        key: {
            "type": spec.value_type.__name__,
            "default": spec.default,
            "choices": list(spec.choices) if spec.choices is not None else None,
            "has_validator": spec.validator is not None,
            "description": spec.description,
            "cuda_only": spec.cuda_only,
            "built": key not in unbuilt,
        }
        for key, spec in sorted(schema.items())
    }
