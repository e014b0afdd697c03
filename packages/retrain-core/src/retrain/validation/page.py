"""The configuration page (docs/configuration.md, titled "Configuration reference"), rendered from
the schema."""

from __future__ import annotations

import json

from retrain.backends import catalog
from retrain.config.fields import FieldSpec, all_fields
from retrain.config.schema import SECTIONS
from retrain.validation.built import not_built_doc
from retrain.validation.inert import inert_doc

HEADER = """\
# Configuration reference

<!-- Generated from retrain.config.schema by scripts/gen_config_docs.py; do not edit by hand.
     A test fails when this file and the schema drift apart. -->

Every key of a single-run TOML file, by section. The **flag** column is the command-line
override (`retrain file.toml --max-steps 40`); it follows the reference implementation's field
names, so commands written for it keep working. Nested tables (`[backend.options]`,
`[algorithm.params]`, `[algorithm.advantage_params]`, `[algorithm.transform_params]`) are
overridden key by key with the repeatable flags `--backend-opt K=V`, `--algorithm-param K=V`,
`--advantage-param K=V` and `--transform-param K=V`. The keys of the three `[algorithm]` tables
are checked against what the configured algorithm reads: a key nothing reads is refused with a
guess, one another algorithm reads loads with a warning naming it ([plugins](plugins.md#the-keys-a-plugin-reads)
for a plugin's keys).

Unknown sections and keys are errors with a suggestion. See [validation](validation.md) for the
cross-field rules and [campaigns](campaigns.md) for the `[campaign]` table.

Keys marked **Not built yet** are accepted at their default only: any other value is refused
when the file loads (`explain`, `trace` and a run alike) with "not built yet in this version"
and what to use instead, so no setting is silently ignored. The backend options that are not
built yet are listed at the end. Keys marked **Live with** tune a feature that is not always
on: set away from their default while it is off, they load with a one-line warning naming the
switch that would read them.
"""


def _default(spec: FieldSpec) -> str:
    d = spec.default
    if d is None:
        return "unset"
    if isinstance(d, bool):
        return "`true`" if d else "`false`"
    if isinstance(d, str):
        return f'`"{d}"`'
    if isinstance(d, dict | list):
        return f"`{json.dumps(d)}`"
    return f"`{d!r}`"


def _type(spec: FieldSpec) -> str:
    name = spec.type_name()
    if spec.choices:
        name += ": " + " \\| ".join(f"`{c}`" for c in spec.choices)
    bounds = spec.bounds_text()
    if bounds:
        name += f" ({bounds})"
    return name


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown() -> str:
    parts = [HEADER]
    by_section: dict[str, list[FieldSpec]] = {}
    for spec in all_fields():
        by_section.setdefault(spec.section, []).append(spec)
    for section in SECTIONS:
        parts.append(f"\n## `[{section}]`\n")
        parts.append("| key | type | default | flag | meaning |")
        parts.append("|---|---|---|---|---|")
        for spec in by_section[section]:
            flag = f"`{spec.flag}`" if not spec.is_mapping else _mapping_flag(spec)
            meaning = " ".join(p for p in (not_built_doc(spec.dotted), spec.description, inert_doc(spec.dotted)) if p)
            parts.append(f"| `{spec.key}` | {_escape(_type(spec))} | {_escape(_default(spec))} | {flag} | "
                         f"{_escape(meaning)} |")
    parts.append("\n## Backend options not built yet\n")
    parts.append("Setting one of these `[backend.options]` to anything but its default is refused, "
                 "except false for a switch: false is what this version does, whatever the default. "
                 "`retrain backends --json` lists every option with `\"built\"`.\n")
    parts.append("| backend | option | what |")
    parts.append("|---|---|---|")
    for entry in catalog.all_entries():  # the installed distributions' definitions
        for option, (what, _) in entry.definition.not_built_options.items():
            parts.append(f"| `{entry.name}` | `{option}` | {_escape(what)} |")
    parts.append("")
    return "\n".join(parts)


def _mapping_flag(spec: FieldSpec) -> str:
    from retrain.config.override import MAPPING_FLAGS

    for flag, target in MAPPING_FLAGS.items():
        if target == spec.flat:
            return f"`{flag} K=V`"
    return "-"
