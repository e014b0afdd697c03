"""Name -> implementation for every pluggable kind.

A name resolves, in order, to: a built-in (imported lazily from its `module:attr` target in
`builtin.TARGETS`), a name registered at run time with `register`, an entry point of the
kind's group (`builtin.ENTRY_POINT_GROUPS`), or — when it contains a dot — a dotted-path
plugin tried under each `[plugins] search_paths` prefix. `Resolved.source` and `.origin`
say which, for `retrain plugins` and error messages.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from retrain.errors import UserError
from retrain.plugins.resolve import PluginError, is_dotted, resolve
from retrain.registry import builtin, entry_points

Source = Literal["builtin", "registered", "entry_point", "plugin"]

_REGISTERED: dict[str, dict[str, Any]] = {}


class UnknownComponent(UserError, LookupError):
    """A name that is neither built in, registered, an entry point, nor a dotted path."""


@dataclass(frozen=True)
class Resolved:
    kind: str
    name: str
    obj: Any
    source: Source
    origin: str  # module:attr, entry-point value (distribution), or the resolved plugin module


def load_target(target: str, name: str) -> Any:
    """Import a built-in `module:attr`; when attr is a mapping of built-ins, pick `name`."""
    module, _, attr = target.partition(":")
    obj = getattr(importlib.import_module(module), attr)
    if isinstance(obj, Mapping):
        return obj[name]
    return obj


def register(kind: str, name: str, obj: Any) -> None:
    """Add a short name for `kind` at run time (tests, notebooks). Built-ins cannot be shadowed."""
    if kind not in builtin.KINDS:
        raise ValueError(f"unknown plugin kind {kind!r}; one of: {', '.join(builtin.KINDS)}")
    if not name or "." in name or ":" in name:
        raise ValueError(f"registered names are short (no dot): {name!r}")
    if name in builtin.NAMES.get(kind, ()):
        raise ValueError(f"{name!r} is a built-in {kind}")
    _REGISTERED.setdefault(kind, {})[name] = obj


def unregister(kind: str, name: str) -> None:
    _REGISTERED.get(kind, {}).pop(name, None)


def registered(kind: str) -> dict[str, Any]:
    return dict(_REGISTERED.get(kind, {}))


def lookup(kind: str, name: str, search_paths: Sequence[str] = ("plugins",)) -> Resolved:
    """Resolve `name` for `kind`; raises UnknownComponent or PluginError with the reason."""
    targets = builtin.TARGETS.get(kind, {})
    if name in targets:
        return Resolved(kind, name, load_target(targets[name], name), "builtin", targets[name])
    if name in _REGISTERED.get(kind, {}):
        obj = _REGISTERED[kind][name]
        return Resolved(kind, name, obj, "registered", getattr(obj, "__module__", "") or "")
    group = builtin.ENTRY_POINT_GROUPS.get(kind)
    ep = entry_points.lookup(group, name) if group else None
    if ep is not None:
        dist = ep.dist.name if ep.dist is not None else "?"
        try:
            obj = ep.load()
        except Exception as exc:
            raise PluginError(
                f"entry point {name!r} ({ep.value}, from {dist}) failed to load: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return Resolved(kind, name, obj, "entry_point", f"{ep.value} ({dist})")
    if is_dotted(name):
        obj, module = resolve(name, search_paths)
        return Resolved(kind, name, obj, "plugin", module)
    known = [*targets, *_REGISTERED.get(kind, {}), *(entry_points.names(group) if group else ())]
    raise UnknownComponent(
        f"unknown {kind.replace('_', ' ')} {name!r}; known: "
        f"{', '.join(known) or '(none)'}; or a dotted path pkg.module.attr"
    )
