"""`retrain plugins`: built-ins with their origin, entry-point groups, discovered modules."""

import json
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from retrain.cli import app
from retrain.registry import builtin

runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_cached_plugins(monkeypatch):
    """Each test has its own ./plugins folder; forget any `plugins` package imported before."""
    for name in [m for m in sys.modules if m == "plugins" or m.startswith("plugins.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", list(sys.path))


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
