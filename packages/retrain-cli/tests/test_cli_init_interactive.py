"""`retrain init -i` as a person uses it: a real process on a pseudo-terminal, answering its
prompts; and the refusal without a terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from retrain.commands.init.interactive import Answers, customise
from retrain.commands.init.templates import TEMPLATES

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")


def _read_until(fd: int, marker: str, seen: list[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while marker not in "".join(seen):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {marker!r} on the terminal; it showed: {''.join(seen)!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                raise AssertionError(f"the process closed the terminal before {marker!r}: {''.join(seen)!r}")
            seen.append(chunk.decode(errors="replace"))


def test_init_interactive_on_a_terminal(tmp_path: Path) -> None:
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "retrain.cli", "init", "-i"], cwd=tmp_path,
                            stdin=secondary, stdout=secondary, stderr=secondary, close_fds=True)
    os.close(secondary)
    seen: list[str] = []
    try:
        for prompt, answer in (("Choose [1]:", "2"), ("Training steps [500]:", "40"),
                               ("Reproducible seed [42]:", "7"), ("Wandb project name", "")):
            _read_until(primary, prompt, seen)
            os.write(primary, (answer + "\n").encode())
        assert proc.wait(timeout=60) == 0, "".join(seen)
        _read_until(primary, "Created retrain.toml (template: experiment)", seen)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(primary)
    config = tomllib.loads((tmp_path / "retrain.toml").read_text())
    assert config["training"]["max_steps"] == 40 and config["training"]["seed"] == 7
    assert config["logging"]["wandb_project"] == ""  # the experiment template's own value, kept
    assert config["sepa"]["steps"] == 500  # only the answered keys change


def test_init_interactive_without_a_terminal(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "retrain.cli", "init", "-i"], cwd=tmp_path, input="2\n40\n7\n\n",
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2  # a usage error, like every bad input
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a terminal" in lines[0] and "--template" in lines[0]
    assert not (tmp_path / "retrain.toml").exists()


@pytest.mark.parametrize("name", ["quickstart", "experiment", "campaign"])
def test_customise_each_menu_template(name: str) -> None:
    t = TEMPLATES[name]
    seed = None if name == "campaign" else 9
    data = tomllib.loads(customise(t.text(), Answers(t, 33, seed, 'proj "x"')))
    steps_table = data["campaign"] if name == "campaign" else data["training"]
    assert steps_table["max_steps"] == 33
    if seed is not None:
        assert data["training"]["seed"] == 9
    else:
        assert data["campaign"]["seeds"] == [42, 101, 202, 303]
    assert data["logging"]["wandb_project"] == 'proj "x"'
