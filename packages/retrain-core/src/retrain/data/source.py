"""Data sources: where prompts and their verifiable references come from.

A source returns a finite sequence of `Example`s in a deterministic order; the trainer walks it
round-robin with a cursor that is saved in checkpoints, so a resumed run sees the same prompts.
A list is the usual sequence; an `ExampleSequence` (the `dataset` source's table rows) builds
each example when asked for and is passed through unlisted. Either may carry `notes`: lines
saying what loading dropped and why, which the run prints.
`[data] source` resolves through the registry like every plugin kind: a built-in name
(`dataset`, `math`, `arithmetic`), a name given to `registry.register("data_source", ...)`, an entry
point of `retrain.data`, or a dotted path. The resolved object is a factory `f(config)`
returning a list of examples, or an object with `.examples()` or `.load()` (the reference's
protocol) returning one. An item is an `Example`, any object with `prompt` / `reference`
attributes (the reference's own Example, with `task`, `info`, `example_id`), or a dict
with a `prompt` key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.registry.core import Resolved, lookup
from retrain.types import Example

__all__ = ["DataError", "Example", "ExampleList", "ExampleSequence", "data_seed", "load_examples", "notes_of"]


class DataError(UserError, ValueError):
    """A data source that cannot produce examples; the message says what to do."""


class ExampleSequence(Sequence[Example]):
    """Examples built when asked for; a slice is one too. `notes`: what loading dropped, and why."""

    notes: tuple[str, ...] = ()


class ExampleList(list[Example]):
    """A list of examples with `notes` on what loading dropped, and why."""

    def __init__(self, items: Iterable[Example] = (), notes: Iterable[str] = ()) -> None:
        super().__init__(items)
        self.notes = tuple(notes)


def notes_of(examples: Sequence[Example]) -> tuple[str, ...]:
    """The lines a source left on what it dropped (none for a plain list)."""
    notes = getattr(examples, "notes", ())
    return tuple(str(n) for n in notes) if isinstance(notes, tuple | list) else ()


def data_seed(config: TrainConfig) -> int:
    """The seed a built-in source orders its problems by: `[training] seed`, 0 when unseeded
    (-1), so an unseeded run still walks one reproducible order."""
    return config.training.seed if config.training.seed >= 0 else 0


def _field(item: Any, name: str, default: Any = "") -> Any:
    if isinstance(item, Mapping):
        return item.get(name, default)
    return getattr(item, name, default)


def _example(item: Any, i: int, where: str) -> Example:
    if isinstance(item, Example):
        return item
    has_prompt = "prompt" in item if isinstance(item, Mapping) else hasattr(item, "prompt")
    if not has_prompt:
        raise DataError(f"data source {where}: item {i} is not an Example, an object with a prompt, "
                        "or a dict with a 'prompt' key")
    info = _field(item, "info", None)
    example_id = _field(item, "example_id", None)
    reference = _field(item, "reference", None)
    if reference is None:
        reference = _field(item, "answer", "")
    return Example(prompt=str(_field(item, "prompt")), reference=str(reference),
                   completion=str(_field(item, "completion", "") or ""), task=str(_field(item, "task") or "default"),
                   info=dict(info) if isinstance(info, Mapping) else None,
                   example_id=example_id if isinstance(example_id, int | str) else None)


def _materialise(obj: Any, where: str) -> Sequence[Example]:
    if isinstance(obj, ExampleSequence):
        return obj
    for method in ("examples", "load"):
        if not isinstance(obj, Sequence) and callable(getattr(obj, method, None)):
            obj = getattr(obj, method)()
            break
    if not isinstance(obj, Sequence) or isinstance(obj, str):
        raise DataError(f"data source {where} returned {type(obj).__name__}, not a list of examples "
                        "(nor an object with .examples() or .load())")
    return ExampleList((_example(item, i, where) for i, item in enumerate(obj)), notes_of(obj))


def _describe(found: Resolved) -> str:
    return f"{found.name!r}" if found.source == "builtin" else f"{found.name!r} ({found.source} {found.origin})"


def load_examples(config: TrainConfig) -> Sequence[Example]:
    name = config.data.source
    found = lookup("data_source", name, config.plugins.search_paths)
    where = _describe(found)
    examples = _materialise(found.obj(config), where)
    if not examples:
        raise DataError(f"data source {where} produced no examples")
    limit = config.training.max_examples
    if 0 < limit < len(examples):
        kept = examples[:limit]
        return kept if isinstance(kept, ExampleSequence) else ExampleList(kept, notes_of(examples))
    return examples
