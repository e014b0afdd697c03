"""CLI overrides: `--flat-field value`, `--flat-field=value`, `--section.key value`, boolean
switches, and repeatable `key=value` flags merged into the nested tables."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from retrain.config.errors import ConfigError, ConfigIssue
from retrain.config.fields import FieldSpec, by_flat, by_section, parse_typed_scalar

#: repeatable flag -> (mapping field flat name, value parser). Backend options stay strings and
#: are coerced by the backend's option schema; plugin params are typed here.
MAPPING_FLAGS: dict[str, str] = {
    "--backend-opt": "backend_options",
    "--algorithm-param": "algorithm_params",
    "--advantage-param": "advantage_params",
    "--transform-param": "transform_params",
}
ALIASES: dict[str, str] = {"--resume": "resume_from"}


@dataclass
class Overrides:
    """Parsed overrides: raw strings per flat field, merged tables per mapping field."""

    values: dict[str, str] = field(default_factory=dict)
    mappings: dict[str, dict[str, Any]] = field(default_factory=dict)
    flags: dict[str, str] = field(default_factory=dict)  # flat -> the flag as typed

    def __bool__(self) -> bool:
        return bool(self.values or self.mappings)


def flag_names() -> list[str]:
    return sorted([s.flag for s in by_flat().values() if not s.is_mapping] + list(MAPPING_FLAGS) + list(ALIASES))


def _lookup(name: str) -> FieldSpec | None:
    if name in ALIASES:
        return by_flat()[ALIASES[name]]
    bare = name[2:]
    spec = by_flat().get(bare.replace("-", "_"))
    if spec is not None:
        return spec
    section, _, key = bare.partition(".")
    if key:
        return by_section().get(section, {}).get(key) or by_section().get(section, {}).get(key.replace("-", "_"))
    return None


def parse_overrides(args: Sequence[str]) -> Overrides:
    """Parse override flags; every problem is reported at once as a ConfigError."""
    out = Overrides()
    issues: list[ConfigIssue] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("--"):
            issues.append(ConfigIssue(f"unexpected argument {token!r}", hint="overrides are --flag value pairs"))
            continue
        name, eq, inline = token.partition("=")
        negated = False
        spec = None
        if name not in MAPPING_FLAGS:
            spec = _lookup(name)
            if spec is None and name.startswith("--no-"):
                spec = _lookup("--" + name[5:])
                negated = spec is not None and spec.is_bool
                if not negated:
                    spec = None
        if name not in MAPPING_FLAGS and spec is None:
            match = difflib.get_close_matches(name, flag_names(), n=1, cutoff=0.6)
            hint = f"did you mean {match[0]}?" if match else "see `retrain man --topic options`"
            issues.append(ConfigIssue("unknown flag", key=name, hint=hint))
            if not eq and i < len(args) and not args[i].startswith("--"):
                i += 1
            continue
        if negated:
            assert spec is not None
            out.values[spec.flat], out.flags[spec.flat] = "false", name
            continue
        if eq:
            value = inline
        elif i < len(args) and not args[i].startswith("--"):
            value = args[i]
            i += 1
        elif spec is not None and spec.is_bool:
            value = "true"
        else:
            issues.append(ConfigIssue("requires a value", key=name))
            continue
        if name in MAPPING_FLAGS:
            key, sep, raw = value.partition("=")
            if not sep or not key.strip():
                issues.append(ConfigIssue(f"{value!r} is not key=value", key=name, hint=f"{name} name=value"))
                continue
            target = MAPPING_FLAGS[name]
            typed: Any = raw if target == "backend_options" else parse_typed_scalar(raw)
            out.mappings.setdefault(target, {})[key.strip()] = typed
            out.flags[target] = name
            continue
        assert spec is not None
        out.values[spec.flat] = value
        out.flags[spec.flat] = name
    if issues:
        raise ConfigError(issues)
    return out
