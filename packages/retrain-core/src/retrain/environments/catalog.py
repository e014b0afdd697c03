"""Environment providers installed here, each loaded from its entry point and checked against
`ENVIRONMENT_CONTRACT` (a mismatch makes it unavailable with one line saying why)."""

from __future__ import annotations

from dataclasses import dataclass, field

from retrain.environments.protocol import ENVIRONMENT_CONTRACT, EnvironmentDefinition
from retrain.registry import contract, entry_points

ENTRY_POINT_GROUP = "retrain.environments"


@dataclass(frozen=True)
class EnvironmentEntry:
    name: str
    definition: EnvironmentDefinition | None  # None when the entry point does not load
    distribution: str
    problems: list[str] = field(default_factory=list)

    @property
    def runnable(self) -> bool:
        return self.definition is not None and self.definition.available and not self.problems

    @property
    def status(self) -> str:
        if self.problems:
            return "unusable (see problem)"
        if self.definition is None or not self.definition.available:
            return "not available in this version"
        return "available"


def lookup(name: str) -> EnvironmentEntry | None:
    """The provider registered as `name`, or None when no installed distribution registers it."""
    ep = entry_points.lookup(ENTRY_POINT_GROUP, name)
    if ep is None:
        return None
    definition, problems = contract.load_definition(ep, EnvironmentDefinition, "environment",
                                                    ENVIRONMENT_CONTRACT)
    distribution = ep.dist.name if ep.dist is not None else "?"
    return EnvironmentEntry(name, definition, distribution, problems)


def names() -> tuple[str, ...]:
    """The provider names registered here."""
    return entry_points.names(ENTRY_POINT_GROUP)


def all_entries() -> list[EnvironmentEntry]:
    return [e for n in entry_points.names(ENTRY_POINT_GROUP) if (e := lookup(n)) is not None]
