"""Workspace tests import their shared helpers (serving.py) from this folder."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


import pytest


@pytest.fixture(scope="session")
def tx_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A Tinker-compatible server (skyrl-tx behind tests/txserver) on 127.0.0.1 for the whole
    session, serving the tiny Qwen3 it was started with; stopped by its pid."""
    from txserver import model, server

    root = tmp_path_factory.mktemp("txserver")
    started = server.start(root, model.build(root / "tiny-qwen3"))
    yield started
    started.stop()
