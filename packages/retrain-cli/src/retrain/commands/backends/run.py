"""`retrain backends [--json]`: the backend catalog as installed here."""

from __future__ import annotations

import json

from retrain.backends.catalog import all_entries, describe_catalog


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
        if not entry.installed:
            lines.append(f"            install: {d.hint}")
        elif d.note:
            lines.append(f"            note: {d.note}")
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
    lines += [
        "",
        "Plugins: set [backend] backend to a dotted path (my_pkg.module:factory), or register a",
        "BackendDefinition in the `retrain.backends` entry-point group of your distribution.",
        "Dotted-path plugins may declare retrain_backend_capabilities / retrain_backend_option_schema.",
    ]
    print("\n".join(lines))
