"""Data sources: where prompts and their verifiable references come from.

A source returns a finite list of `Example`s in a deterministic order; the trainer walks it
round-robin with a cursor that is saved in checkpoints, so a resumed run sees the same prompts.
`[data] source` resolves through the registry like every plugin kind: a built-in name
(`math`, `arithmetic`), a name given to `registry.register("data_source", ...)`, an entry
point of `retrain.data`, or a dotted path. The resolved object is a factory `f(config)`
returning a list of examples, or an object with `.examples()` or `.load()` (the reference's
protocol) returning one. An item is an `Example`, any object with `prompt` / `reference`
attributes (the reference's own Example, with `task`, `info`, `example_id`), or a dict
with a `prompt` key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.registry.core import Resolved, lookup
from retrain.types import Example

__all__ = ["DataError", "Example", "data_seed", "load_examples"]


class DataError(UserError, ValueError):
    """A data source that cannot produce examples; the message says what to do."""


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


def _materialise(obj: Any, where: str) -> list[Example]:
    for method in ("examples", "load"):
        if not isinstance(obj, Sequence) and callable(getattr(obj, method, None)):
            obj = getattr(obj, method)()
            break
    if not isinstance(obj, Sequence) or isinstance(obj, str):
        raise DataError(f"data source {where} returned {type(obj).__name__}, not a list of examples "
                        "(nor an object with .examples() or .load())")
    return [_example(item, i, where) for i, item in enumerate(obj)]


def _describe(found: Resolved) -> str:
    return f"{found.name!r}" if found.source == "builtin" else f"{found.name!r} ({found.source} {found.origin})"


def load_examples(config: TrainConfig) -> list[Example]:
    name = config.data.source
    found = lookup("data_source", name, config.plugins.search_paths)
    where = _describe(found)
    examples = _materialise(found.obj(config), where)
    if config.training.max_examples > 0:
        examples = examples[: config.training.max_examples]
    if not examples:
        raise DataError(f"data source {where} produced no examples")
    return examples
