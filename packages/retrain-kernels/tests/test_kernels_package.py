"""retrain-kernels is importable without side effects."""

from __future__ import annotations


def test_package_imports() -> None:
    import retrain.kernels

    assert retrain.kernels.__doc__
