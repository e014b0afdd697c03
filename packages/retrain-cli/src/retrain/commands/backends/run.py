"""`retrain backends [--json]`: the backend catalog as installed here, the contract versions
this core supports, and the environment providers with the contract each declares."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping

from retrain.backends.catalog import BackendEntry, all_entries, describe_catalog
from retrain.backends.protocol import BACKEND_CONTRACT
from retrain.environments import catalog as environments
from retrain.environments.protocol import ENVIRONMENT_CONTRACT
from retrain.registry.contract import distribution_version, supported_text, text

INDENT = " " * 12


def run(as_json: bool) -> None:
    if as_json:
        _print_json()
        return
    core = distribution_version("retrain-core") or "?"
    lines = [f"Contracts: backend {supported_text(BACKEND_CONTRACT)}, environment "
             f"{supported_text(ENVIRONMENT_CONTRACT)} (retrain-core {core})", "", "Backends:"]
    for entry in all_entries():
        lines += _backend_lines(entry)
    lines += ["", "Environments:", *_environment_lines(), "", *_plugin_notes()]
    print("\n".join(lines))


def _print_json() -> None:
    data = describe_catalog()
    data["contracts"]["environment"] = text(ENVIRONMENT_CONTRACT)
    data["environments"] = [_describe_environment(e) for e in environments.all_entries()]
    from retrain.commands.doctor.probe import unsloth_here

    data["unsloth_runs_here"] = unsloth_here()
    print(json.dumps(data, indent=2, default=str))


def _backend_lines(entry: BackendEntry) -> list[str]:
    d = entry.definition
    built = f", contract {text(d.contract)}" if entry.installed else ""
    lines = [f"  {entry.name:<9} {entry.status:<30} [{d.distribution}{built}] ({entry.source})"]
    if d.note:
        lines.append(f"            note: {d.note}")
    elif not entry.installed:
        lines.append(f"            install: {d.hint}")
    for problem in entry.problems:
        lines.append(f"            problem: {problem}")
    if entry.name == "unsloth":
        from retrain.commands.doctor.probe import unsloth_here

        lines.append(f"            runs here: {unsloth_here()}")
    lines.append(f"            {d.capabilities.summary()}")
    schema = d.option_schema or {}
    lines.append(f"            options: {len(schema)} (`retrain backends --json` lists them)" if schema
                 else "            options: none")
    unbuilt = [k for k in schema if k in d.not_built_options]
    if d.available and unbuilt:
        lines.append(f"{INDENT}not built yet ({len(unbuilt)}, refused when set), and why:")
        lines += _unbuilt_lines(d.not_built_options, unbuilt)
    return lines


def _unbuilt_lines(table: Mapping[str, tuple[str, str]], unbuilt: list[str]) -> list[str]:
    """The unbuilt options grouped by the feature (and reason) that leaves them unbuilt."""
    by_what: dict[str, list[str]] = {}
    for key in unbuilt:
        by_what.setdefault(table[key][0], []).append(key)
    lines: list[str] = []
    for what, keys in by_what.items():
        lines += textwrap.wrap(f"{', '.join(keys)}: {what}", width=100, initial_indent=INDENT + "  ",
                               subsequent_indent=INDENT + "    ")
    return lines


def _environment_lines() -> list[str]:
    lines = []
    envs = environments.all_entries()
    for env in envs:
        declared = text(env.definition.contract) if env.definition is not None else "?"
        lines.append(f"  {env.name:<9} {env.status:<30} [{env.distribution}, contract {declared}]")
        if env.definition is not None and env.definition.note and not env.problems:
            lines.append(f"            note: {env.definition.note}")
        lines += [f"            problem: {p}" for p in env.problems]
    if not envs:
        lines.append("  none installed (pip install retrain-envs)")
    return lines


def _plugin_notes() -> list[str]:
    return [
        "Plugins: set [backend] backend to a dotted path (my_pkg.module:factory), or register a",
        "BackendDefinition in the `retrain.backends` entry-point group of your distribution.",
        "Dotted-path plugins may declare retrain_backend_capabilities / retrain_backend_option_schema.",
        "A registered definition declares the contract it was built against (docs/backends.md).",
        "",
        *textwrap.wrap(
            "Not built yet in this version: the "
            + ", ".join(e.name for e in all_entries() if not e.definition.available)
            + " backends (explain previews them; a run refuses them). The max, trtllm and mlx engines "
            "and some options are not built either; a config that "
            "asks for them is refused by name (`retrain man validation`).", width=100),
    ]


def _describe_environment(entry: environments.EnvironmentEntry) -> dict[str, object]:
    d = entry.definition
    return {
        "name": entry.name,
        "distribution": entry.distribution,
        "contract": text(d.contract) if d is not None else None,
        "status": entry.status,
        "note": d.note if d is not None else "",
        "problems": entry.problems,
    }
