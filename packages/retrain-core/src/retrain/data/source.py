"""Data sources: where prompts and their verifiable references come from.

A source returns a finite list of `Example`s in a deterministic order; the trainer walks it
round-robin with a cursor that is saved in checkpoints, so a resumed run sees the same prompts.
Sources are built-in names (`math`, `arithmetic`), entry points of `retrain.data`, or dotted
paths to a factory `f(config) -> list[Example] | object with .examples()`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.plugins.resolve import is_dotted, resolve
from retrain.registry.entry_points import lookup
from retrain.types import Example


class DataError(ValueError):
    """A data source that cannot produce examples; the message says what to do."""


def _builtin(name: str) -> Callable[[TrainConfig], list[Example]] | None:
    if name == "arithmetic":
        from retrain.data.arithmetic import load_arithmetic

        return load_arithmetic
    if name == "math":
        from retrain.data.math import load_math

        return load_math
    return None


def _materialise(obj: Any, where: str) -> list[Example]:
    items = obj.examples() if hasattr(obj, "examples") else obj
    if not isinstance(items, Sequence) or isinstance(items, str):
        raise DataError(f"data source {where} returned {type(items).__name__}, not a list of examples")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, Example):
            out.append(item)
        elif isinstance(item, dict) and "prompt" in item:
            out.append(Example(prompt=str(item["prompt"]), reference=str(item.get("reference", "")),
                               completion=str(item.get("completion", "")), task=str(item.get("task", "default"))))
        else:
            raise DataError(f"data source {where}: item {i} is not an Example or a prompt/reference dict")
    return out


def load_examples(config: TrainConfig) -> list[Example]:
    name = config.data.source
    factory = _builtin(name)
    if factory is not None:
        examples = factory(config)
    elif is_dotted(name):
        fn, module = resolve(name, config.plugins.search_paths)
        examples = _materialise(fn(config), f"{name!r} ({module})")
    else:
        ep = lookup("retrain.data", name)
        if ep is None:
            raise DataError(f"unknown data source {name!r}")
        examples = _materialise(ep.load()(config), f"{name!r} (entry point {ep.value})")
    if config.training.max_examples > 0:
        examples = examples[: config.training.max_examples]
    if not examples:
        raise DataError(f"data source {name!r} produced no examples")
    return examples
