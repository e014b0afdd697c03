"""`retrain --help` and the commands that do not train import no heavy ML package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "transformers", "peft", "tinker", "verifiers", "triton", "unsloth", "ray", "numpy.linalg", "fastapi",
         "uvicorn")

PROBE = """
import sys, io, contextlib, json
from retrain.cli import app
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    try:
        app(args=sys.argv[1:], prog_name="retrain")
    except SystemExit:
        pass
heavy = {HEAVY!r}
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {{h.split('.')[0] for h in heavy if h != 'numpy.linalg'}})))
"""


@pytest.mark.parametrize("args", [
    ["--help"], ["explain", "--json"], ["backends", "--json"], ["doctor"], ["man", "options"],
    ["init", "--list"], ["migrate-config", "retrain.toml", "--check"], ["--version"], ["status", "--json"],
    ["serve", "--help"],
    ["eval", "--help"], ["eval", "retrain.toml", "--adapter", "a", "--run", "b"], ["data", "--help"],
    ["export", "--help"], ["export", "nowhere", "--out", "x"], ["export", "retrain.toml", "--out", "x", "--format", "onnx"],
    ["man", "squeeze"], ["benchmark"], ["tree", "--json"],
])
def test_no_heavy_imports(args: list[str]) -> None:
    code = PROBE.format(HEAVY=HEAVY)
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=True)
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded == [], f"{args} imported {loaded}"


def test_help_imports_no_command_module() -> None:
    """Not a timing test: --help loads typer and `retrain.cli` only; a command module, the
    config machinery, msgspec or rich imported at start-up would be paid by every command."""
    code = "import sys\nfrom retrain.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n" \
           "print(sorted(m for m in sys.modules if m.startswith(('retrain', 'msgspec', 'rich'))))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "['retrain', 'retrain.cli']"


def test_command_signatures_are_evaluated() -> None:
    """typer reads every command's signature at each start; string annotations (postponed
    evaluation) would be compiled and evaluated again every time."""
    from retrain.cli import app, status_app

    callbacks = [info.callback for info in (*app.registered_commands, *status_app.registered_commands)]
    assert len(callbacks) > 10
    for fn in callbacks:
        assert fn is not None
        strings = {name: a for name, a in fn.__annotations__.items() if isinstance(a, str)}
        assert not strings, f"{fn.__name__} has string annotations {strings}"
