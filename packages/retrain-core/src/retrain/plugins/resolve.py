"""Dotted-path plugins: `pkg.module:attr` or `pkg.module.attr`, tried under each search path.

For a target `mod.attr` and search paths `["plugins"]`, the modules tried are `plugins.mod`
then `mod`; the first that imports wins. A module that exists but fails to import (a syntax
error, a missing dependency of its own) is an error, not a reason to try the next candidate.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from retrain.errors import UserError


class PluginError(UserError, ImportError):
    """A dotted plugin path that cannot be resolved; the message says why."""


class MissingAttribute(PluginError):
    """The module imported but has no such attribute; `names` are its public ones."""

    def __init__(self, module: str, attr: str, names: Sequence[str]) -> None:
        self.module, self.attr, self.names = module, attr, list(names)
        super().__init__(f"module {module!r} has no attribute {attr!r}")


def is_dotted(value: str) -> bool:
    module, attr = split_target(value)
    return bool(module) and bool(attr)


def split_target(target: str) -> tuple[str, str]:
    if ":" in target:
        module, _, attr = target.partition(":")
    else:
        module, _, attr = target.rpartition(".")
    return module.strip(), attr.strip()


def add_import_roots(dirs: Iterable[str | Path]) -> None:
    """Make plugin packages beside the config file (and in the cwd) importable."""
    for d in dirs:
        p = str(Path(d).resolve())
        if p not in sys.path:
            sys.path.insert(0, p)


def candidate_modules(module: str, search_paths: Sequence[str]) -> list[str]:
    out: list[str] = []
    for prefix in search_paths:
        prefix = prefix.strip().strip(".")
        if prefix and f"{prefix}.{module}" not in out:
            out.append(f"{prefix}.{module}")
    if module not in out:
        out.append(module)
    return out


def resolve(target: str, search_paths: Sequence[str] = ("plugins",)) -> tuple[Any, str]:
    """(object, resolved module name) for a dotted target; raises PluginError."""
    module, attr = split_target(target)
    if not module or not attr:
        raise PluginError(f"{target!r} is not a dotted path (expected package.module.attr)")
    tried: list[str] = []
    for candidate in candidate_modules(module, search_paths):
        try:
            mod = importlib.import_module(candidate)
        except ModuleNotFoundError as exc:
            if exc.name and (candidate == exc.name or candidate.startswith(exc.name + ".")):
                tried.append(candidate)
                continue
            raise PluginError(f"module {candidate!r} failed to import: {exc}") from exc
        except Exception as exc:
            raise PluginError(f"module {candidate!r} failed to import: {type(exc).__name__}: {exc}") from exc
        if not hasattr(mod, attr):
            raise MissingAttribute(candidate, attr, [n for n in dir(mod) if not n.startswith("_")])
        return getattr(mod, attr), candidate
    raise PluginError(f"no module named {module!r} (tried {', '.join(tried)})")


def discover_modules(search_paths: Sequence[str], roots: Sequence[Path] = (Path.cwd(),)) -> list[str]:
    """`<prefix>.<stem>` for each `*.py` (not starting with `_`) in each search-path folder."""
    found: list[str] = []
    for prefix in search_paths:
        rel = Path(*prefix.strip().split("."))
        for root in roots:
            folder = root / rel
            if folder.is_dir():
                for py in sorted(folder.glob("*.py")):
                    name = f"{prefix}.{py.stem}"
                    if not py.stem.startswith("_") and name not in found:
                        found.append(name)
    return found
