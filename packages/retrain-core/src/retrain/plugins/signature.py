"""Calling conventions of plugin callables, read from their signatures.

Plugins are plain callables; what they are handed depends on how they are declared:
a factory with no required arguments is called first and its result used instead; a
single positional parameter named `ctx`/`context` receives a context record; a `params`
parameter (or `**kwargs`) receives the params table as well. Kinds whose plugin may be an
object with a method (a reward's `score`, a planning detector's `mask`) use such an object
as it is, and build one from a class or factory, handing it the config when it takes one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

_CONTEXT_NAMES = ("ctx", "context")


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _positional(sig: inspect.Signature) -> list[inspect.Parameter]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p for p in sig.parameters.values() if p.kind in kinds]


def is_factory(obj: Any) -> bool:
    """A callable that can be called with no arguments (a class or a zero-arg function)."""
    if not callable(obj):
        return False
    sig = _signature(obj)
    if sig is None:
        return False
    required = [
        p
        for p in sig.parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    return not required


def from_factory(obj: Any, spec: type) -> Any:
    """`obj` itself when it is a `spec` or no zero-argument factory; else what it returns."""
    if isinstance(obj, spec) or not is_factory(obj):
        return obj
    return obj()


def has_method(obj: Any, method: str) -> bool:
    """An object (not a class) with `method`: a plugin instance, used as it is."""
    return hasattr(obj, method) and not inspect.isclass(obj)


def required_positional(fn: Any) -> int | None:
    """Positional parameters without a default (None: the signature cannot be read)."""
    sig = _signature(fn)
    if sig is None:
        return None
    return sum(1 for p in _positional(sig) if p.default is inspect.Parameter.empty)


def takes_config(fn: Any) -> bool:
    """Exactly one parameter, named config or cfg."""
    sig = _signature(fn)
    if sig is None:
        return False
    params = list(sig.parameters.values())
    return len(params) == 1 and params[0].name in ("config", "cfg")


def takes_context(fn: Callable[..., Any]) -> bool:
    """One positional parameter, named ctx or context."""
    sig = _signature(fn)
    if sig is None:
        return False
    pos = _positional(sig)
    return len(pos) == 1 and pos[0].name in _CONTEXT_NAMES


def takes_params(fn: Callable[..., Any]) -> bool:
    """Declares a `params` parameter (positional or keyword) or accepts **kwargs."""
    sig = _signature(fn)
    if sig is None:
        return False
    return any(
        p.name == "params" or p.kind is inspect.Parameter.VAR_KEYWORD
        for p in sig.parameters.values()
    )


def call_with_params(fn: Callable[..., Any], first: Any, params: dict[str, Any]) -> Any:
    """`fn(first, params)` when `fn` declares params, else `fn(first)`."""
    if not takes_params(fn):
        return fn(first)
    sig = _signature(fn)
    assert sig is not None
    param = sig.parameters.get("params")
    if param is not None and param.kind is inspect.Parameter.KEYWORD_ONLY:
        return fn(first, params=params)
    if param is None:
        return fn(first, params=params)
    return fn(first, params)


def declared_param_keys(obj: Any) -> frozenset[str] | None:
    """The keys of its params table a plugin says it reads (an attribute `param_keys` on the
    object its path names: a collection of names), or None when it says nothing; then what it
    reads is its own business and its table cannot be checked. TypeError for a declaration
    that is not a collection of names."""
    keys = getattr(obj, "param_keys", None)
    if keys is None:
        return None
    if isinstance(keys, str | bytes) or not all(isinstance(k, str) for k in keys):
        raise TypeError(f"param_keys must be a collection of key names, got {keys!r:.80}")
    return frozenset(keys)
