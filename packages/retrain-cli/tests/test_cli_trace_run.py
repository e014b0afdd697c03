"""`retrain trace`: the preflight passes for every advantage x transform on the local backend,
fails (exit 1, with the reason) where a combination is invalid, and never imports torch."""

import json
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from retrain.cli import app
from retrain.registry import builtin

runner = CliRunner()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def trace(*args):
    return runner.invoke(app, ["trace", *args])


@pytest.mark.parametrize("adv", builtin.ADVANTAGE_MODES)
@pytest.mark.parametrize("transform", builtin.TRANSFORM_MODES)
def test_every_combination_passes_on_local(adv, transform):
    result = trace("--advantage-mode", adv, "--transform-mode", transform, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["probe_cases_passed"] == report["probe_cases_run"] == 3
    assert report["flow"]["backend"] == "local"
    assert report["flow"]["preserves_token_advantages"]


def test_text_output_and_config_file(tmp_path):
    (tmp_path / "run.toml").write_text(
        textwrap.dedent("""
        [algorithm]
        advantage_mode = "grpo"
        transform_mode = "gtpo_hicra"
    """)
    )
    result = trace("run.toml")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "Condition: grpo+gtpo_hicra"
    assert "Probes: 3/3 passed" in lines
    assert lines[-1] == "PASS"


def test_token_varying_on_a_scalar_backend_fails_with_the_reason():
    result = trace("--backend", "prime_rl", "--transform-mode", "gtpo_sepa")
    assert result.exit_code == 1
    assert "[ERROR] [compat]" in result.stdout and result.stdout.rstrip().endswith("FAIL")
    assert "one advantage per completion" in result.stderr
    ok = trace("--backend", "prime_rl", "--transform-mode", "none")
    assert ok.exit_code == 0, ok.output


def test_invalid_params_fail():
    result = trace("--transform-mode", "delight", "--transform-param", "delight_eta_mode=sometimes")
    assert result.exit_code == 1
    assert "delight_eta_mode" in result.stdout


def test_config_errors_exit_2():
    result = trace("--advantage-mode", "gpro")
    assert result.exit_code == 2
    assert "grpo" in result.stderr


def test_trace_does_not_import_torch(tmp_path):
    code = textwrap.dedent("""
        import sys
        from retrain.cli import main
        try:
            main(["trace", "--advantage-mode", "grpo", "--transform-mode", "gtpo_sepa"])
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code
        assert "torch" not in sys.modules, "trace imported torch"
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
