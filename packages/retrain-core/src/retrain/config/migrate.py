"""Legacy-key migration (`retrain migrate-config`): `[backend] prime_rl_*` keys move to
`[backend.options]`. The rewrite is textual so comments and ordering survive."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

LEGACY_BACKEND_KEYS: dict[str, str] = {
    "prime_rl_transport": "transport",
    "prime_rl_zmq_host": "zmq_host",
    "prime_rl_zmq_port": "zmq_port",
    "prime_rl_zmq_hwm": "zmq_hwm",
    "prime_rl_strict_advantages": "strict_advantages",
    "prime_rl_sync_wait_s": "sync_wait_s",
    "prime_rl_sync_poll_s": "sync_poll_s",
}

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*(?:"([^"]+)"|'([^']+)'|([A-Za-z0-9_\-]+))\s*=""")


@dataclass
class Migration:
    changed: bool
    legacy_keys: list[str]
    merged_backend_options: dict[str, Any]
    output_text: str
    notes: list[str] = field(default_factory=list)


def toml_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value)


def _ordered(options: Mapping[str, Any]) -> list[tuple[str, Any]]:
    order = list(LEGACY_BACKEND_KEYS.values())
    first = [(k, options[k]) for k in order if k in options]
    rest = sorted((k, v) for k, v in options.items() if k not in order)
    return first + rest


def legacy_rewrite_hint(backend_table: Mapping[str, Any]) -> str:
    """The `[backend]` + `[backend.options]` block that replaces a legacy table."""
    options = dict(backend_table.get("options") or {})
    for old, new in LEGACY_BACKEND_KEYS.items():
        if old in backend_table:
            options.setdefault(new, backend_table[old])
    lines = ["[backend]"]
    lines += [f"{k} = {toml_literal(v)}" for k, v in backend_table.items()
              if k not in LEGACY_BACKEND_KEYS and k != "options"]
    lines.append("[backend.options]")
    lines += [f"{k} = {toml_literal(v)}" for k, v in _ordered(options)]
    return "\n".join(lines)


def migrate_text(text: str) -> Migration:
    """Rewrite legacy keys; existing [backend.options] values win over migrated ones."""
    data = tomllib.loads(text)
    raw_backend = data.get("backend")
    backend: dict[str, Any] = raw_backend if isinstance(raw_backend, dict) else {}
    legacy = sorted(k for k in backend if k in LEGACY_BACKEND_KEYS)
    existing = dict(backend.get("options") or {}) if isinstance(backend.get("options"), dict) else {}
    if not legacy:
        return Migration(False, [], existing, text)
    migrated = {LEGACY_BACKEND_KEYS[k]: backend[k] for k in LEGACY_BACKEND_KEYS if k in backend}
    merged = {**migrated, **existing}
    to_add = [(k, v) for k, v in _ordered(migrated) if k not in existing]

    lines = text.splitlines(keepends=True)
    out: list[str] = []
    current = ""
    backend_end = None  # index in `out` after the last line of [backend]
    options_end = None
    has_options_table = "backend.options" in _headers(text)
    for line in lines:
        header = _HEADER.match(line)
        if header:
            current = ".".join(p.strip().strip('"') for p in header.group(1).split("."))
            out.append(line)
            if current == "backend":
                backend_end = len(out)
            if current == "backend.options":
                options_end = len(out)
            continue
        key = _KEY.match(line)
        name = (key.group(1) or key.group(2) or key.group(3)) if key else None
        if current == "backend" and name in LEGACY_BACKEND_KEYS:
            continue
        if current == "backend" and name == "options" and not has_options_table:
            continue  # an inline `options = {...}` is replaced by the new table
        out.append(line)
        if current == "backend" and line.strip():
            backend_end = len(out)
        if current == "backend.options" and line.strip():
            options_end = len(out)
    new_lines = [f"{k} = {toml_literal(v)}\n" for k, v in to_add]
    if has_options_table and options_end is not None:
        out[options_end:options_end] = new_lines
    else:
        if not has_options_table:
            raw_inline = backend.get("options")
            inline: dict[str, Any] = raw_inline if isinstance(raw_inline, dict) else {}
            new_lines = [f"{k} = {toml_literal(v)}\n" for k, v in _ordered({**migrated, **inline})]
        block = ["\n", "[backend.options]\n", *new_lines]
        at = backend_end if backend_end is not None else len(out)
        if at and not out[at - 1].endswith("\n"):
            out[at - 1] += "\n"
        out[at:at] = block
    result = "".join(out)
    if text.endswith("\n") and not result.endswith("\n"):
        result += "\n"
    if not text.endswith("\n") and result.endswith("\n"):
        result = result[:-1]
    return Migration(True, legacy, merged, result)


def _headers(text: str) -> set[str]:
    found = set()
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            found.add(".".join(p.strip().strip('"') for p in m.group(1).split(".")))
    return found
