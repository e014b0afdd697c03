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


@pytest.fixture(scope="session")
def demo_run(build_once) -> Path:  # type: ignore[no-untyped-def]
    """The README's demo (the bundled retrain.toml: tiny, 400 RL steps) run once per session by
    the real command in a process of its own, from a folder holding a copy of the config; its
    output kept beside it (stdout.log, stderr.log). Slow tier only."""
    import os
    import shutil
    import subprocess

    def run(root: Path) -> None:
        shutil.copy(Path(__file__).resolve().parents[1] / "retrain.toml", root / "retrain.toml")
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        proc = subprocess.run([sys.executable, "-m", "retrain.cli"], cwd=root, env=env, capture_output=True,
                              text=True, timeout=1800, check=False)
        (root / "stdout.log").write_text(proc.stdout)
        (root / "stderr.log").write_text(proc.stderr)
        assert proc.returncode == 0, proc.stderr[-3000:]

    return Path(build_once("demo", run))
