"""`build_detector(config)`: the planning detector of `[planning] detector`.

Built-ins are `regex` and `semantic`; an entry point of `retrain.planning` or a dotted path
may name a class or factory (called with the config when it takes an argument) returning an
object with `mask(tokens)`, or a function `f(tokens) -> 0/1 list` itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from retrain.config.schema import TrainConfig
from retrain.planning.types import Mask, PlanningDetector
from retrain.plugins.signature import has_method, takes_config
from retrain.registry.core import lookup


class FunctionDetector:
    def __init__(self, fn: Callable[[Sequence[str]], Any], name: str) -> None:
        self.fn, self.name = fn, name

    def mask(self, tokens: Sequence[str]) -> Mask:
        out = np.asarray(list(self.fn(list(tokens))), dtype=np.int8).reshape(-1)
        if out.shape[0] != len(tokens):
            raise ValueError(
                f"planning detector {self.name!r} returned {out.shape[0]} flags "
                f"for {len(tokens)} tokens"
            )
        flags: Mask = (out != 0).astype(np.int8)
        return flags


def build_detector(config: TrainConfig) -> PlanningDetector:
    name = config.planning.detector
    found = lookup("planning_detector", name, config.plugins.search_paths)
    obj = found.obj
    if found.source == "builtin":
        built: PlanningDetector = obj.from_config(config)
        return built
    if has_method(obj, "mask"):
        given: PlanningDetector = obj
        return given
    if inspect.isclass(obj) or (callable(obj) and takes_config(obj)):
        made: Any = obj(config) if takes_config(obj) else obj()
        return made if hasattr(made, "mask") else FunctionDetector(made, name)
    if callable(obj):
        return FunctionDetector(obj, name)
    raise TypeError(f"planning detector {name!r} has no mask() and is not callable")


def masks(detector: PlanningDetector, token_rows: Sequence[Sequence[str]]) -> list[Mask]:
    """One mask per completion."""
    return [detector.mask(row) for row in token_rows]
