"""Comparing the metrics rows of two runs that should have logged the same thing (a resumed
run and an uninterrupted one)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def assert_rows_match(got: Sequence[Mapping[str, Any]], want: Sequence[Mapping[str, Any]], *,
                      rel: float) -> None:
    """The same steps and keys; floats within `rel` (relative, and absolute below 1; 0 means
    bit for bit); everything else equal. The failure names the step and key."""
    assert len(got) == len(want), (len(got), len(want))
    for a, b in zip(got, want, strict=True):
        step = a.get("step")
        assert a.keys() == b.keys(), (step, sorted(a.keys() ^ b.keys()))
        for key, va in a.items():
            vb = b[key]
            if isinstance(va, float) and isinstance(vb, float):
                assert math.isclose(va, vb, rel_tol=rel, abs_tol=rel), (step, key, va, vb)
            else:
                assert va == vb, (step, key, va, vb)
