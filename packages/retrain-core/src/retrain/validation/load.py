"""TOML -> defaults -> CLI overrides -> environment fallbacks -> validation.

`load_config` is the one entry point. Every problem found on the way is collected and raised
together as a ConfigError whose issues name the file, the line (when the TOML has one), the
key and a hint. Unknown sections and keys are errors with a did-you-mean (the reference
silently ignored them, so typos trained with defaults).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrain.config.env import env_fallbacks
from retrain.config.errors import ConfigError, ConfigIssue, did_you_mean
from retrain.config.fields import (
    CoerceError,
    FieldSpec,
    by_flat,
    by_section,
    coerce,
    flat_dict,
    with_values,
)
from retrain.config.folders import with_run_folders
from retrain.config.migrate import LEGACY_BACKEND_KEYS, legacy_rewrite_hint
from retrain.config.override import Overrides, parse_overrides
from retrain.config.schema import KEY_ALIASES, KIND_TABLES, SECTIONS, TrainConfig
from retrain.config.source import Kind, TomlSource, read_toml
from retrain.validation import validate

#: the free-form tables whose keys are reported under their own names (validation.params)
ALGORITHM_TABLES = frozenset({"algorithm_params", "advantage_params", "transform_params"})
_LABEL = re.compile(r"^\[([A-Za-z0-9_.]+)\] ([A-Za-z0-9_\-]+)")


@dataclass
class LoadedConfig:
    config: TrainConfig
    source: TomlSource | None = None
    warnings: list[ConfigIssue] = field(default_factory=list)
    overrides: Overrides = field(default_factory=Overrides)

    @property
    def kind(self) -> Kind:
        return self.source.kind if self.source else "single"

    @property
    def path(self) -> str:
        return self.source.path if self.source else ""


def tables_to_config(data: Mapping[str, Any], source: TomlSource | None = None,
                     *, ignore: Sequence[str] = KIND_TABLES) -> tuple[TrainConfig, list[ConfigIssue]]:
    """Build a TrainConfig from parsed TOML tables; unknown or mistyped entries are issues."""
    issues: list[ConfigIssue] = []
    values: dict[FieldSpec, Any] = {}
    sections = by_section()
    for top, table in data.items():
        if top in ignore:
            continue
        if top not in SECTIONS:
            owner = [s for s, keys in sections.items() if top in keys]
            if owner and not isinstance(table, dict):
                issues.append(ConfigIssue(f"key outside any section; it belongs in [{owner[0]}]",
                                          key=top, hint=f"[{owner[0]}]\n{top} = ..."))
            else:
                hint = did_you_mean(top, [*SECTIONS, *KIND_TABLES]) or f"sections: {', '.join(SECTIONS)}"
                issues.append(ConfigIssue("unknown section", key=f"[{top}]", hint=hint))
            continue
        if not isinstance(table, dict):
            issues.append(ConfigIssue("must be a table", key=f"[{top}]", hint=f"[{top}]\nkey = value"))
            continue
        if top == "backend":
            legacy = sorted(k for k in table if k in LEGACY_BACKEND_KEYS)
            if legacy:
                issues.append(ConfigIssue(
                    f"legacy keys {', '.join(legacy)} moved to [backend.options]",
                    key="[backend] " + legacy[0],
                    hint="run `retrain migrate-config --write FILE`, or use:\n" + legacy_rewrite_hint(table)))
                table = {k: v for k, v in table.items() if k not in LEGACY_BACKEND_KEYS}
        for key, raw in table.items():
            canonical = KEY_ALIASES.get((top, str(key)), str(key))
            spec = sections[top].get(canonical)
            label = f"[{top}] {key}"
            if spec is None:
                other = [s for s, keys in sections.items() if key in keys and s != top]
                if other:
                    hint = f"{key!r} belongs in [{other[0]}]"
                else:
                    hint = did_you_mean(key, sections[top]) or f"keys of [{top}]: {', '.join(sections[top])}"
                issues.append(ConfigIssue("unknown key", key=label, hint=hint))
                continue
            if isinstance(raw, dict) and not spec.is_mapping:
                issues.append(ConfigIssue("unknown table", key=f"[{top}.{key}]",
                                          hint=did_you_mean(key, [k for k, s in sections[top].items() if s.is_mapping])))
                continue
            try:
                values[spec] = coerce(spec.type, raw)
            except CoerceError as exc:
                issues.append(ConfigIssue(f"{_show(raw)}: {exc}", key=label, hint=_default_hint(spec)))
    return with_values(TrainConfig(), values), issues


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _default_hint(spec: FieldSpec) -> str:
    if spec.is_mapping:
        return f"[{spec.section}.{spec.key}] table"
    d = spec.default
    if d is None:
        return ""
    if isinstance(d, bool):
        return f"{spec.key} = {'true' if d else 'false'}"
    if isinstance(d, str):
        if spec.choices:
            return f'{spec.key} = "{spec.choices[0]}"'
        return f'{spec.key} = "{d}"'
    return f"{spec.key} = {d!r}"


def apply_overrides(config: TrainConfig, overrides: Overrides) -> tuple[TrainConfig, list[ConfigIssue]]:
    issues: list[ConfigIssue] = []
    values: dict[FieldSpec, Any] = {}
    specs = by_flat()
    for flat, raw in overrides.values.items():
        spec = specs[flat]
        try:
            values[spec] = coerce(spec.type, raw, from_text=True)
        except CoerceError as exc:
            issues.append(ConfigIssue(f"{raw!r}: {exc}", key=overrides.flags.get(flat, spec.flag)))
    current = flat_dict(config)
    for flat, table in overrides.mappings.items():
        values[specs[flat]] = {**current[flat], **table}
    return with_values(config, values), issues


def load_config(
    path: str | Path | None = None,
    overrides: Overrides | Sequence[str] = (),
    *,
    environ: Mapping[str, str] | None = None,
    import_plugins: bool = True,
) -> LoadedConfig:
    """Load, layer and validate a single-run config (the base sections of any config kind)."""
    source = read_toml(path) if path is not None else None
    if not isinstance(overrides, Overrides):
        overrides = parse_overrides(list(overrides))
    issues: list[ConfigIssue] = []
    config = TrainConfig()
    if source is not None:
        config, issues = tables_to_config(source.data, source)
    config, override_issues = apply_overrides(config, overrides)
    issues += override_issues
    fills = env_fallbacks(flat_dict(config), os.environ if environ is None else environ)
    config = with_values(config, {by_flat()[k]: v for k, v in fills.items()})
    # Validation runs even after parse problems (bad values stay at their defaults), so the
    # user sees every problem of the file at once; plugins import only for a clean config.
    clean = not issues
    if source is not None and import_plugins and clean:
        from retrain.plugins.resolve import add_import_roots

        add_import_roots([Path(source.path).parent, Path.cwd()])
    config, errors, warnings = validate(config, import_plugins=import_plugins and clean)
    config = with_run_folders(config)
    issues += errors
    if issues:
        located = locate(issues, source, overrides)
        raise ConfigError(sorted(located, key=lambda i: (i.line is None, i.line or 0)))
    return LoadedConfig(config, source, locate(warnings, source, overrides), overrides)


def locate(issues: Sequence[ConfigIssue], source: TomlSource | None, overrides: Overrides) -> list[ConfigIssue]:
    """Attach the file and line to issues about TOML keys; name the flag for CLI values."""
    out = []
    flags = {by_flat()[flat].label: flag for flat, flag in overrides.flags.items()}
    for flat, table in overrides.mappings.items():  # a key given by `--advantage-param k=v` and the like
        if flat not in ALGORITHM_TABLES:
            continue
        spec = by_flat()[flat]
        flags.update({f"[{spec.section}.{spec.key}] {k}": f"{overrides.flags[flat]} {k}" for k in table})
    for issue in issues:
        key, line = issue.key, issue.line
        m = _LABEL.match(key)
        if m and key in flags:
            key = f"{flags[key]} (command line)"
        elif m and source is not None and line is None:
            line = source.line_of(m.group(1), m.group(2).strip())
        elif source is not None and line is None and key.startswith("[") and key.endswith("]"):
            line = source.line_of(key[1:-1])
        elif source is not None and line is None and key and " " not in key and not key.startswith("-"):
            line = source.line_of("", key)
        path = issue.path or (source.path if source is not None and not key.startswith("--") else "")
        out.append(ConfigIssue(issue.message, key=key, hint=issue.hint, line=line, path=path))
    return out
