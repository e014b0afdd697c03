"""Workspace-wide test settings: nothing reaches a hub, and torch uses one thread per worker
(pytest-xdist runs two workers on two cores)."""

import os
import sys

import pytest

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_name] = "1"
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _no_cached_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests write their own ./plugins folders (the default [plugins] search path); forget any
    `plugins` package an earlier test imported, and undo sys.path additions afterwards."""
    for name in [m for m in sys.modules if m == "plugins" or m.startswith("plugins.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", list(sys.path))
