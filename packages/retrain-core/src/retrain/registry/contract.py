"""Contract versions: which backend or environment contract a distribution was built against.

A contract is `(major, minor)`. This core runs a definition whose major equals its own and
whose minor is at most its own: a minor bump only adds (an optional method, a field with a
default), so a backend built against 1.0 runs on a core at 1.3, while one built against 1.3
may use what a core at 1.0 lacks. A major bump changes or removes something implementations
rely on. Distribution version ranges (`retrain-core>=0.1,<0.2`) guard installs that resolve
dependencies; this check also catches third-party packages with loose ranges and installs made
with `--no-deps`, at the moment the definition is loaded.
"""

from __future__ import annotations

from dataclasses import replace
from importlib import metadata
from typing import Any, Protocol, TypeVar

Contract = tuple[int, int]


class Definition(Protocol):
    """What the backend and environment definitions (frozen dataclasses) share for the check."""

    @property
    def distribution(self) -> str: ...
    @property
    def contract(self) -> Contract | None: ...


D = TypeVar("D", bound=Definition)


def text(contract: Any) -> str:
    """`1.0` for a valid contract, `none` when undeclared, else the declared value as written."""
    if contract is None:
        return "none"
    return f"{contract[0]}.{contract[1]}" if _is_contract(contract) else repr(contract)


def supported_text(supported: Contract) -> str:
    major, minor = supported
    return f"{major}.0" if minor == 0 else f"{major}.0 to {major}.{minor}"


def _is_contract(value: Any) -> bool:
    return (isinstance(value, tuple) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value))


def distribution_version(name: str) -> str | None:
    """The installed version of distribution `name`, None when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def mismatch(kind: str, distribution: str, declared: Any, supported: Contract) -> str | None:
    """One line saying why a definition from `distribution` declaring `declared` cannot run on
    this core, naming both contracts and what to install; None when it can run."""
    core = f"retrain-core {distribution_version('retrain-core') or '?'}"
    here = f"{core} supports {kind} contract {supported_text(supported)}"
    if declared is None:
        return (f"{distribution} declares no {kind} contract; {here} "
                f"(its definition must set contract={supported!r})")
    if not _is_contract(declared):
        return f"{distribution} declares {kind} contract {declared!r}, not (major, minor); {here}"
    if declared[0] == supported[0] and declared[1] <= supported[1]:
        return None
    upgrade = distribution if declared < supported else "retrain-core"
    return f"{distribution} declares {kind} contract {text(declared)}; {here}: upgrade {upgrade}"


def load_definition(ep: metadata.EntryPoint, cls: type[D], kind: str,
                    supported: Contract) -> tuple[D | None, list[str]]:
    """Load a definition registered in an entry-point group and check its contract.

    A definition whose contract does not match comes back unavailable, with the mismatch as
    its note, so every caller that refuses unavailable definitions refuses it with that line.
    A broken entry point comes back as None with the reason; it must not break a listing.
    """
    try:
        obj = ep.load()
    except Exception as exc:
        return None, [f"entry point {ep.value!r} failed to load: {type(exc).__name__}: {exc}"]
    if not isinstance(obj, cls):
        return None, [f"entry point {ep.value!r} is not a {cls.__name__}"]
    distribution = obj.distribution
    if ep.dist is not None:
        distribution = f"{ep.dist.name} {ep.dist.version}"
    problem = mismatch(kind, distribution, obj.contract, supported)
    if problem is None:
        return obj, []
    refused: D = replace(obj, available=False, note=problem)  # type: ignore[type-var]
    return refused, [problem]
