"""A fix to Triton's CPU interpreter for triton < 3.7 with NumPy ≥ 2.4 (triton-lang/triton#9171).

The interpreter holds every scalar — a kernel's scalar arguments, `tl.program_id`, values
computed from them — as a one-element numpy array of shape (1,), and implements
`tl.tensor.__index__` as `int(handle.data)`. NumPy 2.4 made `int()` of an array with
ndim > 0 a TypeError (a DeprecationWarning since 1.25), so any Python-level `range()` over a
runtime bound, e.g. `for k0 in range(0, K, BLOCK_K)`, fails on triton ≤ 3.6 with "only
0-dimensional arrays can be converted to Python scalars". Triton 3.7 reads `int(handle.data.squeeze())` instead;
`patch_interpreter_index` installs that same `__index__` where the installed interpreter lacks
it (with NumPy 1.25 to 2.3 that only silences the warning). Compiled kernels never reach this
code: it changes nothing but the interpreter's Python-side `int()` of a scalar.
"""

from __future__ import annotations

import inspect
import operator
import warnings
from types import SimpleNamespace
from typing import Any

_MARK = "_retrain_index_fix"


def _index(self: Any) -> int:
    """Triton ≥ 3.7's `tl.tensor.__index__` under the interpreter."""
    return int(self.handle.data.squeeze())


def _index_is_broken(patch_lang_tensor: Any, interpreter: Any) -> bool:
    """Whether `patch_lang_tensor` installs an `__index__` that rejects a one-element scalar."""
    import numpy as np

    probe = type("_Probe", (), {})
    scoped = len(inspect.signature(patch_lang_tensor).parameters) > 1  # triton ≥ 3.6
    patch_lang_tensor(probe, *([interpreter._LangPatchScope()] if scoped else []))
    value: Any = probe()
    value.handle = SimpleNamespace(data=np.array([3], dtype=np.int32))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # NumPy 1.25 to 2.3 only warn
        try:
            return operator.index(value) != 3
        except (TypeError, DeprecationWarning):
            return True


def patch_interpreter_index() -> bool:
    """Install the fixed `__index__` if this triton's interpreter needs it; True if it did.

    Idempotent; a no-op on triton ≥ 3.7, with NumPy < 1.25, and for an interpreter whose
    internals are not the ones this was written against.
    """
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, _MARK, False):
        return False
    try:
        if not _index_is_broken(original, interpreter):
            return False
    except Exception:  # unfamiliar internals: leave the interpreter as it is
        return False

    def patched(tensor: Any, *scope: Any) -> None:
        original(tensor, *scope)
        if scope:  # triton 3.6: attributes are set for one launch and restored after it
            scope[0].set_attr(tensor, "__index__", _index)
        else:  # triton ≤ 3.5: set for good, as the interpreter itself does
            tensor.__index__ = _index

    setattr(patched, _MARK, True)
    # `_patch_lang` looks `_patch_lang_tensor` up in the module at every launch.
    interpreter._patch_lang_tensor = patched
    return True
