"""Each distribution builds a wheel, and the CLI + Tinker backend install without torch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
UV = shutil.which("uv")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(UV is None, reason="uv is not on PATH")]


def uv(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> str:
    assert UV is not None
    proc = subprocess.run([UV, *args], cwd=cwd, capture_output=True, text=True, timeout=900,
                          env={**os.environ, **(env or {})}, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    uv("build", "--all-packages", "--wheel", "--out-dir", str(out), "--quiet")
    return out


def test_one_wheel_per_distribution_holding_only_its_files(wheels: Path) -> None:
    built = sorted(p.name.split("-")[0] for p in wheels.glob("*.whl"))
    assert built == sorted(["retrain_backends_local", "retrain_backends_tinker", "retrain_backends_unsloth",
                            "retrain_cli", "retrain_core", "retrain_envs", "retrain_kernels"])
    for wheel in wheels.glob("*.whl"):
        names = zipfile.ZipFile(wheel).namelist()
        assert "retrain/__init__.py" not in names and "retrain/backends/__init__.py" not in names
    cli = next(wheels.glob("retrain_cli-*.whl"))
    names = zipfile.ZipFile(cli).namelist()
    assert "retrain/commands/manual/topics/quickstart.txt" in names
    assert "retrain/commands/init/templates/default.toml" in names
    assert not any(n.startswith("retrain/config/") for n in names)


def test_cli_and_tinker_backend_install_without_torch(wheels: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    uv("venv", "--quiet", str(venv))
    py = venv / "bin" / "python"
    uv("pip", "install", "--quiet", "--python", str(py), "--find-links", str(wheels),
       "retrain-cli", "retrain-backends-tinker")
    proc = subprocess.run([str(venv / "bin" / "retrain"), "backends", "--json"], capture_output=True,
                          text=True, timeout=120, check=True, cwd=tmp_path)
    by_name = {b["name"]: b for b in json.loads(proc.stdout)["builtins"]}
    assert by_name["tinker"]["installed"] is True
    assert by_name["local"]["installed"] is False and by_name["local"]["status"] == "not installed"
    probe = subprocess.run([str(py), "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "True", "torch was installed"
    (tmp_path / "c.toml").write_text("[backend]\nbackend = 'local'\n")
    explain = subprocess.run([str(venv / "bin" / "retrain"), "explain", "c.toml", "--json"], capture_output=True,
                             text=True, timeout=120, check=True, cwd=tmp_path)
    assert any("retrain-backends-local" in w for w in json.loads(explain.stdout)["dep_warnings"])
