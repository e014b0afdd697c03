"""The fault-injection suite's shared fixtures; its helpers are `fault_run` (this folder is put
on sys.path, as tests/ is, so the suite's files import it and the workspace's `tiny_run`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fault_run import Spawned


@pytest.fixture
def in_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's folder as the working folder, importable (a run's reward lives there)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.fixture
def spawn() -> Iterator[Callable[..., Spawned]]:
    """spawn(cfg, *args, env=...) -> a Spawned run; every one still running is killed at the end."""
    started: list[Spawned] = []

    def start(cfg: Path, *args: str, env: dict[str, str] | None = None) -> Spawned:
        started.append(Spawned(cfg, *args, env=env))
        return started[-1]

    yield start
    for s in started:
        s.kill()
