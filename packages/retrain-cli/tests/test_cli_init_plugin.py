"""`retrain init-plugin`: every kind scaffolds a module whose generated test passes as
generated, and the printed TOML selects it."""

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from retrain.cli import app
from retrain.commands.plugins.kinds import KINDS
from retrain.commands.plugins.name import sanitize

runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_cached_plugins(monkeypatch):
    """Each test has its own ./plugins folder; forget any `plugins` package imported before."""
    for name in [m for m in sys.modules if m == "plugins" or m.startswith("plugins.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_every_kind_scaffolds_a_passing_test(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for kind in KINDS:
        result = runner.invoke(
            app, ["init-plugin", "--kind", kind, "--name", f"my {kind}", "--with-test"]
        )
        assert result.exit_code == 0, result.output
        assert (tmp_path / "plugins" / f"my_{kind}.py").is_file()
        assert (tmp_path / "tests" / f"test_my_{kind}_plugin.py").is_file()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(KINDS)} passed" in done.stdout or "passed" in done.stdout


def test_generated_transform_runs_through_trace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["init-plugin", "-k", "transform", "-n", "soft credit"])
    assert result.exit_code == 0, result.output
    assert 'transform_mode = "soft_credit.soft_credit"' in result.stdout
    toml = result.stdout.split("Add to your config:\n\n", 1)[1].split("Run it with")[0]
    (tmp_path / "retrain.toml").write_text(toml)
    traced = runner.invoke(app, ["trace", "--json"])
    assert traced.exit_code == 0, traced.output
    assert '"transform_mode": "soft_credit.soft_credit"' in traced.stdout


def test_custom_output_dir_adds_search_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["init-plugin", "-k", "reward", "-n", "exact", "-o", "src/rewards"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "src" / "rewards" / "exact.py").is_file()
    assert 'search_paths = ["src.rewards"]' in result.stdout


def test_refuses_to_overwrite_and_rejects_bad_input(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, ["init-plugin", "-k", "advantage", "-n", "rank"]).exit_code == 0
    again = runner.invoke(app, ["init-plugin", "-k", "advantage", "-n", "rank"])
    assert again.exit_code == 2 and "already exists" in again.stderr
    bad = runner.invoke(app, ["init-plugin", "-k", "transfrom", "-n", "x"])
    assert bad.exit_code == 2 and "transform" in bad.stderr
    missing = runner.invoke(app, ["init-plugin", "-k", "reward"])
    assert missing.exit_code == 2


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("my plugin", "my_plugin"),
        ("--x--", "x"),
        ("", "my_plugin"),
        ("9lives", "plugin_9lives"),
        ("a..b", "a_b"),
    ],
)
def test_names_become_identifiers(raw, expected):
    assert sanitize(raw) == expected
