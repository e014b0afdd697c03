"""A run that stops itself, in process on the tiny model: a reward that keeps failing stops
the run at its error budget, loudly and saved; a Ctrl-C finishes the step, saves, records
the run as interrupted, and the resumed run ends exactly where an uninterrupted one does."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from tiny_run import Messages, write_tiny_run

from retrain.io.log import read_jsonl
from retrain.training.interrupt import RunInterrupted, resume_command
from retrain.training.reward_faults import RewardErrorBudget
from retrain.training.trainers import train
from retrain.validation.load import load_config

FAILING = '''
import os

def score(response, reference):
    if os.environ.get("FAIL_ALWAYS") or any(ch.isdigit() for ch in response[:1]):
        return {"not": "a number"} if os.environ.get("FAIL_TYPE") else 1 / 0
    return min(1.0, sum(ch.isdigit() for ch in response) / 4)
'''

MOSTLY_FAILING = '''
calls = [0]

def score(response, reference):
    calls[0] += 1
    if calls[0] % 4:  # three completions of every four
        raise KeyError("answer")
    return 1.0
'''

INTERRUPTING = '''
import os, signal

calls = [0]

def score(response, reference):
    calls[0] += 1
    if str(calls[0]) == os.environ.get("SIGINT_AT_CALL"):
        os.kill(os.getpid(), signal.SIGINT)
    return min(1.0, sum(ch.isdigit() for ch in response) / 4)
'''


def config_for(root: Path, module: str, source: str, name: str = "run",
               tables: dict[str, dict[str, object]] | None = None, **training: object) -> Any:
    (root / f"{module}.py").write_text(source)
    cfg = write_tiny_run(root, name, training={"max_steps": 4, **training}, tables=tables)
    cfg.write_text(cfg.read_text().replace('custom_module = "toy_reward"', f'custom_module = "{module}"'))
    sys.modules.pop(module, None)
    importlib.invalidate_caches()
    return load_config(cfg, [], import_plugins=False).config


@pytest.fixture
def in_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_reward_that_always_fails_stops_at_its_budget_loudly_and_saved(in_root: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL_ALWAYS", "1")
    config = config_for(in_root, "failing_always", FAILING, max_steps=6)
    messages = Messages()
    with pytest.raises(RewardErrorBudget) as stopped:
        train(config, messages)
    text = str(stopped.value)
    assert "failed on 8 of 8 completions for 3 steps in a row" in text
    assert "ZeroDivisionError at failing_always.py:6 in score: division by zero" in text
    assert stopped.value.exit_code == 3 and "--resume" in stopped.value.hint
    firsts = [m for m in messages.lines if m.startswith("reward failed (first of its kind")]
    assert len(firsts) == 1 and "ZeroDivisionError at failing_always.py:6" in firsts[0]
    logs = in_root / "run" / "logs"
    assert len(read_jsonl(logs / "metrics.jsonl")) == 3  # stopped after the third failing step
    log = (logs / "reward_errors.log").read_text()
    assert log.count("Traceback (most recent call last)") == 1 and "1 / 0" in log
    meta = json.loads((logs / "run_meta.json").read_text())
    assert meta["status"] == "failed" and meta["failure_status"] == "exception:RewardErrorBudget"
    assert "division by zero" in meta["error_message"]
    state = json.loads((logs / "trainer_state.json").read_text())
    assert state["step"] == 2 and (in_root / "run" / "adapters" / "checkpoint_step_3").is_dir()


def test_the_default_budget_stops_a_reward_that_fails_on_most_completions(in_root: Path) -> None:
    """[reward] max_error_share defaults to a half: a reward that fails on 3 of 4 completions
    stops the run after 3 steps, where the old default (every completion) let it train on."""
    config = config_for(in_root, "failing_mostly", MOSTLY_FAILING, max_steps=6)
    assert config.reward.max_error_share == 0.5
    with pytest.raises(RewardErrorBudget) as stopped:
        train(config, Messages())
    assert "failed on 6 of 8 completions for 3 steps in a row ([reward] max_error_share = 0.5" in str(stopped.value)
    assert len(read_jsonl(in_root / "run" / "logs" / "metrics.jsonl")) == 3


def test_evaluation_shows_a_failing_reward_before_the_first_step(in_root: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL_ALWAYS", "1")
    config = config_for(in_root, "failing_in_eval", FAILING, max_steps=1,
                        tables={"eval": {"before_train": True, "at_end": False, "k": 2}})
    messages = Messages()
    with pytest.raises(RewardErrorBudget, match="the reward scored none of the run's 8 completions"):
        train(config, messages)  # one step, fewer than max_error_steps: the run's end is the stop
    first_eval = next(m for m in messages.lines if m.startswith("eval after 0 RL steps"))
    assert first_eval.endswith("reward_errors=32/32")  # 16 held-out problems x 2 samples
    firsts = [m for m in messages.lines if m.startswith("reward failed (first of its kind")]
    assert len(firsts) == 1 and firsts[0].startswith("reward failed (first of its kind, eval after 0 RL steps)")
    (row,) = read_jsonl(in_root / "run" / "logs" / "eval.jsonl")
    assert row["eval/reward_errors"] == 32


def test_occasional_failures_are_printed_once_per_kind_and_the_run_goes_on(in_root: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    config = config_for(in_root, "failing_sometimes", FAILING, max_steps=3)
    messages = Messages()
    result = train(config, messages)
    assert result.steps == 3
    rows = read_jsonl(in_root / "run" / "logs" / "metrics.jsonl")
    errors = [r["reward_errors"] for r in rows]
    assert sum(errors) > 0 and all(e < 8 for e in errors)  # a few per step, never all
    firsts = [m for m in messages.lines if m.startswith("reward failed (first of its kind")]
    assert len(firsts) == 1  # one kind, however many steps it recurred on


def test_a_result_that_is_not_a_number_is_its_own_kind(in_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL_ALWAYS", "1")
    monkeypatch.setenv("FAIL_TYPE", "1")
    config = config_for(in_root, "failing_type", FAILING, max_steps=2)
    config.reward.max_error_steps = 0  # never stop: the budget can be switched off
    messages = Messages()
    result = train(config, messages)
    firsts = [m for m in messages.lines if m.startswith("reward failed (first of its kind")]
    assert len(firsts) == 1 and "a result that is not a number (dict)" in firsts[0]
    # the run completes, and its verdict blames the reward's failure, not a sparse reward
    assert result.summary["untrained"].startswith("no RL step trained: the reward failed on most completions")
    assert "a result that is not a number (dict)" in result.summary["untrained"]


def test_ctrl_c_finishes_the_step_saves_and_resumes_exactly(in_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = config_for(in_root, "interrupting", INTERRUPTING, name="plain", max_steps=5)
    train(plain, Messages())

    monkeypatch.setenv("SIGINT_AT_CALL", "13")  # during step 1 (8 completions a step)
    config = config_for(in_root, "interrupting", INTERRUPTING, name="cut", max_steps=5)
    messages = Messages()
    with pytest.raises(RunInterrupted) as stopped:
        train(config, messages)
    assert any(m.startswith("interrupt: finishing this step") for m in messages.lines)
    assert "interrupted after step 1; checkpoint saved:" in str(stopped.value)
    assert stopped.value.exit_code == 130
    logs = in_root / "cut" / "logs"
    assert json.loads((logs / "run_meta.json").read_text())["status"] == "interrupted"
    assert len(read_jsonl(logs / "metrics.jsonl")) == 2

    monkeypatch.delenv("SIGINT_AT_CALL")
    resumed = load_config(in_root / "cut.toml", ["--resume", str(logs)], import_plugins=False).config
    train(resumed, Messages())
    want = read_jsonl(in_root / "plain" / "logs" / "metrics.jsonl")
    got = read_jsonl(logs / "metrics.jsonl")
    volatile = ("time", "_s", "tokens_per_second", "share", "process_max_rss_mb")
    def steady(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if not any(t in k for t in volatile)} for r in rows]
    differ = [(a.get("step"), k, a.get(k), b.get(k)) for a, b in zip(steady(got), steady(want), strict=False)
              for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    assert len(got) == len(want) and not differ, differ
    adapter = "adapters/final/adapter_model.safetensors"
    assert (in_root / "cut" / adapter).read_bytes() == (in_root / "plain" / adapter).read_bytes()


def test_the_resume_command_keeps_the_arguments_and_replaces_resume() -> None:
    assert resume_command("logs/a", ["run.toml", "--seed", "3", "--resume", "old"]) == \
        "retrain run.toml --seed 3 --resume logs/a"
    assert resume_command("logs/a b", ["run", "x.toml", "--resume=old"]) == "retrain x.toml --resume 'logs/a b'"
