"""Names registered in the entry-point groups, read without importing the targets."""

from __future__ import annotations

from functools import cache
from importlib import metadata


@cache
def names(group: str) -> tuple[str, ...]:
    return tuple(sorted({ep.name for ep in metadata.entry_points(group=group)}))


@cache
def lookup(group: str, name: str) -> metadata.EntryPoint | None:
    for ep in metadata.entry_points(group=group):
        if ep.name == name:
            return ep
    return None
