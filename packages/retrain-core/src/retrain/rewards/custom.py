"""Custom rewards: a function `fn(response, reference)` named by module + function, or a
dotted-path / entry-point reward.

`[reward] type = "custom"` calls `custom_module.custom_function` (tried under `[plugins]
search_paths`). A dotted `type` names either such a function directly, a class or factory
called with the config (or with nothing) that returns an object with `score`, or an object
with `score`. Either may be `async`; a returned coroutine is awaited; a string result is
parsed with float().
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.plugins.resolve import resolve
from retrain.plugins.signature import has_method, required_positional


class FunctionReward:
    """A plain scoring function as a reward."""

    def __init__(self, fn: Callable[[str, str], Any], name: str = "") -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", "reward")

    def score(self, response: str, reference: str) -> Any:
        return self.fn(response, reference)


class CustomReward(FunctionReward):
    """`[reward] type = "custom"`: custom_module.custom_function."""

    def __init__(self, config: TrainConfig) -> None:
        r = config.reward
        if not r.custom_module:
            raise ValueError("[reward] type = custom needs custom_module")
        target = f"{r.custom_module}:{r.custom_function or 'score'}"
        fn, _ = resolve(target, config.plugins.search_paths)
        if not callable(fn):
            raise TypeError(f"custom reward {target!r} is not callable")
        super().__init__(fn, target)


def reward_from_object(obj: Any, config: TrainConfig, name: str) -> Any:
    """A reward object from what a plugin path or entry point points at."""
    if has_method(obj, "score"):
        return obj
    if not callable(obj):
        raise TypeError(f"reward {name!r} is neither callable nor has a score method")
    required = required_positional(obj)
    if not inspect.isclass(obj) and required is not None and required >= 2:
        return FunctionReward(obj, name)
    made = obj(config) if required and required >= 1 else obj()
    if hasattr(made, "score"):
        return made
    if callable(made):
        return FunctionReward(made, name)
    raise TypeError(f"reward factory {name!r} returned {type(made).__name__}, not a reward")


def as_float(value: Any) -> float:
    """A reward function's result as a float (awaiting a coroutine, parsing a string)."""
    if inspect.isawaitable(value):
        value = asyncio.run(_await(value))
    if isinstance(value, str):
        return float(value.strip())
    return float(value)


async def _await(value: Any) -> Any:
    return await value


def is_async(reward: Any) -> bool:
    fn = reward.fn if isinstance(reward, FunctionReward) else getattr(reward, "score", None)
    return inspect.iscoroutinefunction(fn)
