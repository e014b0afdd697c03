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


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A real `vllm serve` of SmolLM2-135M-Instruct on 127.0.0.1 for the whole session, with
    runtime LoRA loading and an API key (tests/vllm_server.py); stopped with every process it
    started. Tests that use it carry `pytest.mark.xdist_group("vllm")`, so one worker runs them
    all and starts it once."""
    from vllm_server import smollm2_folder, start_vllm

    served = start_vllm(tmp_path_factory.mktemp("vllm"), smollm2_folder())
    try:
        yield served
    finally:
        served.stop()
