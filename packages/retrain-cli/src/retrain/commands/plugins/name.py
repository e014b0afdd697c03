"""Plugin names: any text becomes a Python identifier."""

from __future__ import annotations

import re


def sanitize(raw: str) -> str:
    """Non-identifier characters become `_`, runs collapse, edges are trimmed; empty gives
    `my_plugin`, a leading digit gets a `plugin_` prefix."""
    name = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", raw.strip())).strip("_")
    if not name:
        return "my_plugin"
    return f"plugin_{name}" if name[0].isdigit() else name


def class_name(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Plugin"
