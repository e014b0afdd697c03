"""`[backend.options]` of the local backend as one value, read once when it is built.

Options arrive normalised (`retrain.backends.options.normalize_options`: every key of
`LOCAL_OPTIONS`, coerced and validated at load). `LocalOptions` derives from that schema: it
holds each option the backend builds (`LOCAL_OPTIONS` less `NOT_BUILT`), read as the schema's
type, and an option it was not given takes the schema's default. A variant's schema
(unsloth's) lacks some of these keys; those take the defaults too. Keys it does not hold are
ignored. Attributes bear the options' names: `options.train_full_model`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field, make_dataclass
from typing import TYPE_CHECKING, Any

from retrain.backends.local.schema import LOCAL_OPTIONS, NOT_BUILT, expandable_mode

#: the options the local backend reads, in the schema's order
BUILT: tuple[str, ...] = tuple(name for name in LOCAL_OPTIONS if name not in NOT_BUILT)
#: readers other than the schema's type: the value the backend acts on
_READ_AS: dict[str, Callable[[Any], Any]] = {"cuda_expandable_segments": expandable_mode}


def reader(name: str) -> Callable[[Any], Any]:
    """How option `name` is read: its schema type, or the parser that gives its meaning."""
    return _READ_AS.get(name, LOCAL_OPTIONS[name].value_type)


def _read(cls: Any, options: Mapping[str, Any]) -> Any:
    """The options given in `options`, each read as `reader` says; defaults for the rest.
    ValueError for a `cuda_expandable_segments` that is not a mode (normalisation refuses it)."""
    return cls(**{name: reader(name)(options[name]) for name in BUILT if name in options})


if TYPE_CHECKING:
    class LocalOptions:
        """The built options as attributes (a frozen dataclass made from the schema)."""

        def __init__(self, **options: Any) -> None: ...
        def __getattr__(self, name: str) -> Any: ...
        @classmethod
        def read(cls, options: Mapping[str, Any]) -> LocalOptions: ...
else:
    # one field per built option, its type and default the schema's: frozen, compared by value
    LocalOptions = make_dataclass(
        "LocalOptions",
        [(name, LOCAL_OPTIONS[name].value_type, field(default=reader(name)(LOCAL_OPTIONS[name].default)))
         for name in BUILT],
        frozen=True, namespace={"read": classmethod(_read)})
    LocalOptions.__module__ = __name__  # pickled by name (torchrun workers, spawn)
