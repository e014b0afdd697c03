"""`retrain trace` calls the configured reward once on a sample completion: a reward that
raises or returns no number fails the trace with exit status 2, naming the fault and where
it was raised; a working reward prints the score it gave."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

RUN = """
[model]
model = "tiny"
[backend]
devices = "cpu"
[data]
source = "arithmetic"
"""
CONFIG = RUN + '[reward]\ntype = "custom"\ncustom_module = "{module}"\n'


@pytest.mark.parametrize(("body", "expected"), [
    ("return 1 / 0", "ZeroDivisionError at {module}.py:3 in score: division by zero"),
    ("return 'high'", "a result that is not a number (str)"),
])
def test_trace_fails_on_a_reward_that_cannot_score(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                                   body: str, expected: str) -> None:
    module = f"probe_{abs(hash(body)) % 10_000}"
    (tmp_path / f"{module}.py").write_text(f"\ndef score(response, reference):\n    {body}\n")
    (tmp_path / "run.toml").write_text(CONFIG.format(module=module))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    res = cli("trace", "run.toml")
    assert res.code == 2, res.stdout + res.stderr
    assert "scoring a sample completion failed: " + expected.format(module=module) in res.stderr


def test_trace_reports_the_sample_score_of_a_working_reward(cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "probe_ok.py").write_text("def score(response, reference):\n    return float(reference in response)\n")
    (tmp_path / "run.toml").write_text(CONFIG.format(module="probe_ok"))
    monkeypatch.syspath_prepend(str(tmp_path))
    res = cli("trace", "run.toml")
    assert res.code == 0, res.stderr
    assert "Reward: custom scored a sample completion 1" in res.stdout


JUDGE = RUN + '[reward]\ntype = "judge"\njudge_base_url = "{url}"\njudge_model = "grader"\njudge_retries = 0\n'


def test_trace_asks_the_judge_about_the_sample(cli, tmp_path: Path, judge_server) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "run.toml").write_text(JUDGE.format(url=judge_server.url))
    res = cli("trace", "run.toml")
    assert res.code == 0, res.stdout + res.stderr
    assert "Reward: judge scored a sample completion 1" in res.stdout
    (asked,) = judge_server.requests
    assert "What is 6 times 7?" in asked["messages"][0]["content"]
    judge_server.mode = "garbage"
    res = cli("trace", "run.toml")
    assert res.code == 2 and "a judge reply that is not a chat completion" in res.stderr
