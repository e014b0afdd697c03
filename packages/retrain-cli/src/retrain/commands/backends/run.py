"""`retrain backends [--json]`: the backend catalog as installed here."""

from __future__ import annotations

import json
import textwrap

from retrain.backends.catalog import all_entries, describe_catalog
from retrain.config.validate.built import option_built

INDENT = " " * 12


def _flag(value: bool) -> str:
    return "yes" if value else "no"


def run(as_json: bool) -> None:
    if as_json:
        print(json.dumps(describe_catalog(), indent=2, default=str))
        return
    lines = ["Backends:"]
    for entry in all_entries():
        d = entry.definition
        caps = d.capabilities
        lines.append(f"  {entry.name:<9} {entry.status:<30} [{d.distribution}] ({entry.source})")
        if d.note:
            lines.append(f"            note: {d.note}")
        elif not entry.installed:
            lines.append(f"            install: {d.hint}")
        for problem in entry.problems:
            lines.append(f"            problem: {problem}")
        lines.append(
            f"            sync loss {_flag(caps.reports_sync_loss)}, token advantages "
            f"{_flag(caps.preserves_token_advantages)}, resume {caps.checkpoint_resume_mode}"
            f"{' (runtime-dependent)' if caps.resume_runtime_dependent else ''}, ECHO shared forward "
            f"{_flag(caps.supports_echo_shared_forward)}"
        )
        schema = d.option_schema or {}
        lines.append(f"            options: {len(schema)} (`retrain backends --json` lists them)" if schema
                     else "            options: none")
        unbuilt = [k for k in schema if not option_built(entry.name, k)]
        if d.available and unbuilt:
            lines += textwrap.wrap(f"not built yet ({len(unbuilt)}, refused when set): {', '.join(unbuilt)}",
                                   width=100, initial_indent=INDENT, subsequent_indent=INDENT + "  ")
    lines += [
        "",
        "Plugins: set [backend] backend to a dotted path (my_pkg.module:factory), or register a",
        "BackendDefinition in the `retrain.backends` entry-point group of your distribution.",
        "Dotted-path plugins may declare retrain_backend_capabilities / retrain_backend_option_schema.",
        "",
        *textwrap.wrap(
            "Not built yet in this version: the "
            + ", ".join(e.name for e in all_entries() if not e.definition.available)
            + " backends (explain previews them; a run refuses them). Environments, inference servers, "
            "ECHO, TL-GRPO, SFT data sets and multi-GPU training are not built either; a config that "
            "asks for them is refused by name (`retrain man validation`).", width=100),
    ]
    print("\n".join(lines))
