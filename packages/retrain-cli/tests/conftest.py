"""Shared helpers for CLI tests: run the real `retrain` app in-process or as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[3]


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    """cli(*args, cwd=tmp_path) -> Result, in-process through typer's runner."""
    from retrain.cli import app

    def run(*args: str, cwd: Path | None = None, input: str | None = None) -> Result:
        monkeypatch.chdir(cwd or tmp_path)
        res = CliRunner().invoke(app, list(args), input=input, prog_name="retrain")
        if res.exception and not isinstance(res.exception, SystemExit):
            raise res.exception
        return Result(res.exit_code, res.stdout, res.stderr)

    return run


def run_subprocess(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Result:
    """The console entry point in a real process, as a user runs it."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "retrain.cli", *args], cwd=cwd, capture_output=True,
                          text=True, env=full_env, timeout=120, check=False)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli_process():  # type: ignore[no-untyped-def]
    return run_subprocess


@pytest.fixture
def repo() -> Path:
    return REPO
