"""Per-run configs: a condition's config made into one run's (seed, steps, its own log and
adapter dirs, W&B naming), written as a TOML file that `retrain FILE` runs alone.

The file holds every value that differs from the default, nested tables included, so a
worker process, a Ray task or a user rerunning one run gets the exact config the campaign
validated (the reference wrote only scalar fields, so parallel runs lost `[backend.options]`
and `[campaign.conditions.transform_params]`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from retrain.backends import catalog
from retrain.config.schema import TrainConfig

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_value(value: Any) -> str:
    """One TOML value; tables and arrays inline, so any nesting fits on one line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON escapes are valid TOML basic-string escapes
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def config_toml(config: TrainConfig, header: str = "") -> str:
    """The config as TOML: each section with the values that differ from the defaults."""
    current = msgspec.to_builtins(config)
    defaults = msgspec.to_builtins(TrainConfig())
    lines = [f"# {line}" for line in header.splitlines()]
    for section, table in current.items():
        changed = {k: v for k, v in table.items() if v != defaults[section].get(k)}
        if "options" in changed and section == "backend":
            changed["options"] = _set_options(config.backend.backend, changed["options"])
            if not changed["options"]:
                del changed["options"]
        if not changed:
            continue
        lines += ["", f"[{section}]"]
        lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in changed.items()]
    return "\n".join(lines).lstrip("\n") + "\n"


def _set_options(backend: str, options: dict[str, Any]) -> dict[str, Any]:
    """A registered backend's options as loaded hold every schema default; keep those set."""
    entry = None if "." in backend or ":" in backend else catalog.lookup(backend)
    schema = (entry.definition.option_schema if entry is not None else None) or {}
    return {k: v for k, v in options.items() if k not in schema or v != schema[k].default}


def fingerprint(text: str) -> str:
    """Identifies a run's config: a campaign resumes only runs whose config is unchanged."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
