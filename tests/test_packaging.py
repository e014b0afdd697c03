"""Each distribution builds a wheel that keeps its ranges on the other members; the CLI and
core wheels alone install without torch and explain the demo; the CLI + Tinker backend
install without torch too, and train against the Tinker test server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from txserver.runs import retrain, write_run
from txserver.server import TxServer

from retrain.io.log import read_jsonl

REPO = Path(__file__).resolve().parents[1]
UV = shutil.which("uv")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(UV is None, reason="uv is not on PATH")]


def uv(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> str:
    assert UV is not None
    proc = subprocess.run([UV, *args], cwd=cwd, capture_output=True, text=True, timeout=900,
                          env={**os.environ, **(env or {})}, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


@pytest.fixture(scope="session")
def wheels(build_once) -> Path:  # type: ignore[no-untyped-def]
    """Built once per session, whichever xdist worker asks first."""
    return build_once("wheels", lambda out: uv("build", "--all-packages", "--wheel", "--out-dir", str(out), "--quiet"))


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


def test_wheels_keep_the_ranges_on_other_members(wheels: Path) -> None:
    cli = next(wheels.glob("retrain_cli-*.whl"))
    with zipfile.ZipFile(cli) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [Requirement(line.split(":", 1)[1]) for line in meta.splitlines()
                if line.startswith("Requires-Dist:")]
    (core,) = [r for r in requires if r.name == "retrain-core"]
    declared = tomllib.loads((REPO / "packages" / "retrain-cli" / "pyproject.toml").read_text())
    (spec,) = [Requirement(s) for s in declared["project"]["dependencies"] if s.startswith("retrain-core")]
    assert str(core.specifier) and core.specifier == spec.specifier, requires


def test_cli_and_core_wheels_alone_explain_the_demo(wheels: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    uv("venv", "--quiet", str(venv))
    py = venv / "bin" / "python"
    uv("pip", "install", "--quiet", "--python", str(py), *map(str, wheels.glob("retrain_c*-*.whl")))
    listed = json.loads(uv("pip", "list", "--python", str(py), "--format", "json"))
    installed = {p["name"] for p in listed}
    assert {n for n in installed if n.startswith("retrain")} == {"retrain-cli", "retrain-core"}
    assert "torch" not in installed
    proc = subprocess.run([str(venv / "bin" / "retrain"), "explain", str(REPO / "retrain.toml")],
                          capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "arithmetic" in proc.stdout and "maxrl" in proc.stdout, proc.stdout
    assert "retrain-backends-local" in proc.stdout + proc.stderr  # says what would run it


@pytest.mark.xdist_group("txserver")  # with the other users of the session's test server
def test_cli_and_tinker_backend_install_without_torch_and_train(wheels: Path, tmp_path: Path,
                                                                tx_server: TxServer) -> None:
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
    # and it trains: two RL steps and a checkpoint against the Tinker test server
    run = tmp_path / "run"
    run.mkdir()
    # (step 1 sampled while step 0 trains: max_async_level = 1)
    cfg = write_run(run, tx_server, eval_every=0, max_steps=2, save_every=2, max_async_level=1)
    done = retrain(cfg, python=str(py), timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = read_jsonl(run / "logs" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1] and all("mean_reward" in r for r in rows)
    assert [r["async/policy_lag"] for r in rows] == [0, 1]
    assert "PyTorch was not found" not in done.stderr  # retrain's own output only
    assert all(r["tinker/forward_backward_s"] > 0 for r in rows if not r["skipped"])
    assert (run / "adapters" / "final" / "adapter_model.safetensors").is_file()
