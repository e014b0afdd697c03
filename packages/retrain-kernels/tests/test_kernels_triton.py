"""Runs the Triton-interpreter tests (tests/interpreter/) in a process of their own.

Triton decides interpreted-or-compiled when a kernel is defined, from TRITON_INTERPRET; a
child process with it set keeps that choice away from every other test in this session.
The kernels' own cases are the fast tier's; the patched peft model (which imports
transformers and peft in the child too) is slow.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

INTERPRETER_TESTS = Path(__file__).parent / "interpreter"


PEFT_MODEL = "test_patched_peft_model_runs_the_kernel"


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                    reason="this session runs the interpreter tests itself")
@pytest.mark.parametrize("select", [
    pytest.param(f"not {PEFT_MODEL}", id="kernels"),
    pytest.param(PEFT_MODEL, id="peft-model", marks=pytest.mark.slow),
])
def test_triton_kernels_under_the_interpreter(select: str) -> None:
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "pytest", str(INTERPRETER_TESTS), "-q", "-p", "no:xdist", "-k", select,
           "--import-mode=importlib", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=600)
    report = done.stdout[-6000:] + done.stderr[-2000:]
    assert done.returncode == 0, report
    assert " passed" in done.stdout and "skipped" not in done.stdout, report
