"""`retrain plugins` lists built-ins with their origin, entry-point groups and discovered
modules; `retrain init-plugin` scaffolds every kind so that its generated test passes as
generated and the printed TOML selects it."""

import json
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from retrain.cli import app
from retrain.commands.plugins.kinds import KINDS
from retrain.commands.plugins.name import sanitize
from retrain.registry import builtin

runner = CliRunner()


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


def test_json_lists_builtins_and_discovered_modules(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "good.py").write_text("def fn(rewards):\n    return rewards\n")
    (tmp_path / "plugins" / "broken.py").write_text("raise ImportError('nope')\n")
    (tmp_path / "plugins" / "_private.py").write_text("")
    result = runner.invoke(app, ["plugins", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["runtime"]["search_paths"] == ["plugins"]
    for kind in (
        "advantage_mode",
        "transform_mode",
        "algorithm_mode",
        "reward",
        "planning_detector",
        "backpressure",
        "backend",
        "data_source",
        "inference_engine",
    ):
        assert info["builtins"][kind], kind
    assert set(builtin.TRANSFORM_MODES) == set(info["builtins"]["transform_mode"])
    assert "strict" in info["builtins"]["reward"]
    assert info["kinds"]["reward"]["builtins"]["match"] == "retrain.rewards.boxed:MatchReward"
    assert info["kinds"]["transform_mode"]["entry_point_group"] == "retrain.transforms"
    assert info["discovered"] == [
        {"module": "plugins.broken", "status": "error: ImportError"},
        {"module": "plugins.good", "status": "ok"},
    ]


def test_text_and_config_search_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "credit.py").write_text("X = 1\n")
    (tmp_path / "run.toml").write_text(
        textwrap.dedent("""
        [plugins]
        search_paths = ["mine"]
    """)
    )
    result = runner.invoke(app, ["plugins", "run.toml"])
    assert result.exit_code == 0, result.output
    assert "Search paths: mine" in result.stdout
    assert "mine.credit" in result.stdout and "gtpo_sepa" in result.stdout
