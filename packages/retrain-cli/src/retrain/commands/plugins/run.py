"""`retrain plugins [--json] [CONFIG]`: what every pluggable kind can be set to here, and
where each name comes from (built in, an installed distribution's entry point, or a module
under the [plugins] search paths). Built-in names that config validation refuses as not built
yet (retrain.validation.built) are listed, marked "not built yet"."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from retrain.backends import catalog
from retrain.config.schema import TrainConfig
from retrain.plugins.resolve import add_import_roots, discover_modules
from retrain.registry import builtin, entry_points
from retrain.validation.built import NOT_BUILT_TEXT, live_values
from retrain.validation.load import load_config

#: the config key each kind's built-in names are values of, where some value is not built
SELECTOR_KEYS = {"reward": "reward.type", "inference_engine": "inference.engine", "trainer": "training.trainer"}


def _entry_points(kind: str) -> list[dict[str, str]]:
    group = builtin.ENTRY_POINT_GROUPS.get(kind)
    if group is None:
        return []
    out = []
    for name in entry_points.names(group):
        ep = entry_points.lookup(group, name)
        if ep is not None:
            dist = ep.dist.name if ep.dist is not None else "?"
            out.append({"name": name, "value": ep.value, "distribution": dist})
    return out


def _import_status(module: str) -> str:
    try:
        importlib.import_module(module)
    except Exception as exc:
        return f"error: {type(exc).__name__}"
    return "ok"


def describe(config: TrainConfig, roots: list[Path]) -> dict[str, Any]:
    add_import_roots(roots)
    kinds: dict[str, Any] = {}
    for kind in builtin.KINDS:
        if kind == "backend":
            builtins = {
                name: f"retrain.backends.catalog ({catalog.lookup(name).status})"  # type: ignore[union-attr]
                for name in catalog.BUILTIN_BACKENDS
            }
        else:
            targets = builtin.TARGETS.get(kind, {})
            provided = {
                ep["name"]: f"{ep['value']} ({ep['distribution']})" for ep in _entry_points(kind)
            }
            names = builtin.NAMES.get(kind, ())
            builtins = {
                name: targets.get(name) or provided.get(name, "(provided by another distribution)")
                for name in names
            }
        key = SELECTOR_KEYS.get(kind)
        live = set(live_values(key, list(builtins))) if key else set(builtins)
        kinds[kind] = {
            "builtins": builtins,
            "not_built": [name for name in builtins if name not in live],
            "entry_point_group": builtin.ENTRY_POINT_GROUPS.get(kind),
            "entry_points": _entry_points(kind),
        }
    discovered = [
        {"module": m, "status": _import_status(m)}
        for m in discover_modules(config.plugins.search_paths, roots)
    ]
    return {
        "runtime": {
            "search_paths": list(config.plugins.search_paths),
            "strict": config.plugins.strict,
            "roots": [str(r) for r in roots],
        },
        "builtins": {k: sorted(v["builtins"]) for k, v in kinds.items()},
        "kinds": kinds,
        "discovered": discovered,
    }


def render_text(info: dict[str, Any]) -> str:
    rt = info["runtime"]
    lines = [
        f"Search paths: {', '.join(rt['search_paths'])} (strict: {str(rt['strict']).lower()})",
        "",
    ]
    for kind, entry in info["kinds"].items():
        lines.append(f"{kind}:")
        for name, origin in entry["builtins"].items():
            if name in entry["not_built"]:
                lines.append(f"  {name:<26} builtin      {NOT_BUILT_TEXT}")
            else:
                lines.append(f"  {name:<26} builtin      {origin}")
        for ep in entry["entry_points"]:
            if ep["name"] in entry["builtins"]:
                continue
            lines.append(f"  {ep['name']:<26} entry point  {ep['value']} ({ep['distribution']})")
        if entry["entry_point_group"]:
            lines.append(
                f"  (installed packages add names in the {entry['entry_point_group']} group)"
            )
    lines.append("")
    if info["discovered"]:
        lines.append("Discovered plugin modules:")
        lines += [f"  {d['module']:<40} {d['status']}" for d in info["discovered"]]
    else:
        lines.append(
            "Discovered plugin modules: none (put *.py files in a search-path folder, e.g. ./plugins)"
        )
    lines.append(
        "Any selector also takes a dotted path pkg.module.attr; `retrain init-plugin` scaffolds one."
    )
    return "\n".join(lines)


def run(config_path: str | None, as_json: bool) -> None:
    if config_path:
        loaded = load_config(config_path)
        config, roots = loaded.config, [Path(config_path).resolve().parent, Path.cwd()]
    else:
        config, roots = TrainConfig(), [Path.cwd()]
    roots = list(dict.fromkeys(roots))
    info = describe(config, roots)
    print(json.dumps(info, indent=2) if as_json else render_text(info))
