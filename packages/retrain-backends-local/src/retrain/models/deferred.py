"""Optional libraries that transformers imports at start-up only to bind one function each,
imported at that function's first call instead.

transformers imports scikit-learn (and pandas, narwhals and parts of scipy through it) in its
assisted-generation module for `roc_curve`, and `scipy.optimize` in its object-detection
losses for `linear_sum_assignment`, whenever they are installed: neither runs in a retrain
run, yet importing them costs about 4 s of CPU at every start of a training command where
they are installed (sentence-transformers and datasets bring them in).

While transformers' model classes (and peft) are imported inside `deferred_optional_imports`,
transformers' availability checks for the two say no; on the way out the checks are restored
and every module that skipped its import gets a stand-in of the same name that imports the
real function at its first call and then runs it. So behaviour is unchanged: the same
function answers the same call. Nothing is changed where the libraries are not installed,
where transformers' model classes were already imported, or where transformers no longer
has these checks.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# transformers' check -> (the module it would import, the names it would bind)
DEFERRED: dict[str, tuple[str, tuple[str, ...]]] = {
    "is_sklearn_available": ("sklearn.metrics", ("roc_curve",)),
    "is_scipy_available": ("scipy.optimize", ("linear_sum_assignment",)),
}


def _on_first_call(module: str, name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"`{module}.{name}`, imported at the first call."
    return call


def _unavailable() -> Callable[[], bool]:
    def check() -> bool:
        return False

    return check


@contextmanager
def deferred_optional_imports() -> Iterator[None]:
    """Import transformers' model classes inside this block to defer the libraries above."""
    if "transformers.modeling_utils" in sys.modules:
        yield
        return
    try:
        import transformers.utils as exported
        from transformers.utils import import_utils
    except ImportError:
        yield
        return
    checks = {flag: getattr(import_utils, flag, None) for flag in DEFERRED}
    if any(check is None or getattr(exported, flag, None) is not check for flag, check in checks.items()):
        yield
        return
    installed = {flag: bool(check()) for flag, check in checks.items()}  # type: ignore[misc]
    stand_ins = {flag: _unavailable() for flag in checks}
    before = set(sys.modules)
    for flag, stand_in in stand_ins.items():
        setattr(import_utils, flag, stand_in)
        setattr(exported, flag, stand_in)
    try:
        yield
    finally:
        for flag, check in checks.items():
            setattr(import_utils, flag, check)
            setattr(exported, flag, check)
        for name in set(sys.modules) - before:
            # a module's own namespace only: getattr would wake lazy modules (torch's have
            # __getattr__ hooks that import, and warn)
            namespace = getattr(sys.modules.get(name), "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for flag, (source, names) in DEFERRED.items():
                if namespace.get(flag) is not stand_ins[flag]:
                    continue
                namespace[flag] = checks[flag]
                if installed[flag]:
                    for attr in names:
                        namespace.setdefault(attr, _on_first_call(source, attr))
