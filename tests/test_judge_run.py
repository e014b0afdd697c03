"""Runs scored by an LLM judge (`[reward] type = "judge"`): three RL steps of the tiny model
judged by `retrain serve` on 127.0.0.1 (the fast tier's one run against that server); a judge
that answers garbage or stops answering is counted and stops the run at its error budget; a
resumed run reads back the verdicts the crashed one had cached; and, in the slow tier, the same
three steps judged by the session's real `vllm serve` of SmolLM2 (tests/vllm_server.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serving import Served, start_server
from tiny_run import ENV, Messages, retrain, write_tiny_run
from vllm_server import API_KEY, VllmServer

from retrain.io.layout import JUDGE_CACHE
from retrain.io.log import read_jsonl
from retrain.training.reward_faults import RewardErrorBudget
from retrain.training.trainers import train
from retrain.validation.load import load_config

CUSTOM = 'type = "custom"\ncustom_module = "toy_reward"'


def judged_run(root: Path, url: str, *, model: str = "tiny", name: str = "run", reward: str = "",
               **training: object) -> Path:
    cfg = write_tiny_run(root, name, training={"max_steps": 3, **training})
    table = f'type = "judge"\njudge_base_url = "{url}"\njudge_model = "{model}"\n{reward}'
    cfg.write_text(cfg.read_text().replace(CUSTOM, table))
    return cfg


def check_judged(logs: Path, steps: int) -> list[dict[str, Any]]:
    rows = read_jsonl(logs / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(steps))
    for row in rows:
        assert row["reward_errors"] == 0 and row["reward_timeouts"] == 0, row
        assert row["judge/requests"] + row["judge/cache_hits"] > 0 and row["judge/latency_s"] >= 0
    return rows


@pytest.fixture(scope="module")
def tiny_judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = start_server(tmp_path_factory.mktemp("judge-serve"))
    try:
        yield served
    finally:
        served.stop()


def test_three_steps_judged_by_retrain_serve(tiny_judge: Served, tmp_path: Path) -> None:
    # a generous deadline: on a loaded 2-core machine the server answers 8 questions at once slowly
    cfg = judged_run(tmp_path, tiny_judge.url + "/v1", reward="timeout_s = 300")
    done = retrain(cfg)
    assert done.returncode == 0, done.stderr[-3000:]
    logs = tmp_path / "run" / "logs"
    rows = check_judged(logs, 3)
    asked = sum(r["judge/requests"] for r in rows)
    assert asked > 0 and any(r["judge/latency_s"] > 0 for r in rows)
    cached = read_jsonl(logs / JUDGE_CACHE)
    assert 0 < len(cached) <= asked and all(c["score"] in (0.0, 1.0) for c in cached)
    assert tiny_judge.counters().get("requests_total", asked) >= asked


def stopped_run(root: Path, url: str, reward: str) -> tuple[RewardErrorBudget, list[dict[str, Any]], Messages]:
    cfg = judged_run(root, url, model="grader", max_steps=5,
                     reward=reward + "\nmax_error_steps = 2\nmax_error_share = 0.5\njudge_retries = 0\n")
    config = load_config(cfg, [], import_plugins=False).config
    messages = Messages()
    with pytest.raises(RewardErrorBudget) as stopped:
        train(config, messages)
    return stopped.value, read_jsonl(root / "run" / "logs" / "metrics.jsonl"), messages


def test_a_judge_that_answers_garbage_is_counted_and_stops_the_run(judge_server: Any, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    judge_server.mode = "garbage"
    stopped, rows, messages = stopped_run(tmp_path, judge_server.url, "")
    # 2 prompts x 4 completions a step, each asked once (an empty one is not asked: 0.0), then the budget
    assert len(rows) == 2 and all(r["reward_errors"] == r["judge/requests"] >= 4 for r in rows), rows
    assert re.search(r"failed on \d of 8 completions for 2 steps in a row", str(stopped))
    assert "a judge reply that is not a chat completion" in str(stopped) and stopped.exit_code == 3
    firsts = [m for m in messages.lines if m.startswith("reward failed (first of its kind")]
    assert len(firsts) == 1 and "<html>" in firsts[0]


def test_a_judge_that_stops_answering_times_out_and_stops_the_run(judge_server: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    judge_server.mode, judge_server.stall_s = "stall", 2.0
    stopped, rows, _ = stopped_run(tmp_path, judge_server.url, "timeout_s = 0.2\njudge_concurrency = 8")
    assert len(rows) == 2 and all(r["reward_timeouts"] == r["judge/requests"] >= 4 for r in rows), rows
    assert all(r["reward_errors"] == 0 and r["judge/retries"] == 0 for r in rows)  # one try each
    assert "a judge that did not answer" in str(stopped)


@pytest.mark.slow
def test_a_resumed_run_reads_back_the_verdicts_of_the_crashed_one(judge_server: Any, tmp_path: Path) -> None:
    judge_server.mode = "Yes"
    cfg = judged_run(tmp_path, judge_server.url, model="grader", save_every=1)
    env = {**os.environ, **ENV}
    run = [sys.executable, "-m", "retrain.cli", str(cfg)]
    killed = subprocess.run(run, cwd=tmp_path, env={**env, "RETRAIN_CRASH_AT": "after_step@1"},
                            capture_output=True, text=True, timeout=900, check=False)
    assert killed.returncode != 0
    before = read_jsonl(tmp_path / "run" / "logs" / "metrics.jsonl")  # steps 0 and 1; step 1 has no checkpoint
    asked_before = len(judge_server.requests)
    assert [r["step"] for r in before] == [0, 1] and asked_before == sum(r["judge/requests"] for r in before)
    resumed = subprocess.run([*run[:-1], "--resume", str(tmp_path / "run" / "logs"), str(cfg)], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=900, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = check_judged(tmp_path / "run" / "logs", 3)
    # step 1 again, the same completions (exact resume): every verdict from the cache, no request
    assert rows[1]["judge/cache_hits"] == before[1]["judge/requests"] > 0 and rows[1]["judge/requests"] == 0.0
    assert rows[1]["mean_reward"] == before[1]["mean_reward"]
    assert len(judge_server.requests) == asked_before + rows[2]["judge/requests"]


@pytest.mark.slow
@pytest.mark.xdist_group("vllm")  # the worker that holds the session's vLLM server
def test_three_steps_judged_by_vllm(vllm_server: VllmServer, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # SmolLM2 judges: a reply with neither yes nor no is `judge/unclear`, not an error
    monkeypatch.setenv("RETRAIN_TEST_JUDGE_KEY", API_KEY)
    cfg = judged_run(tmp_path, vllm_server.url + "/v1", model=str(vllm_server.model),
                     reward='judge_api_key_env = "RETRAIN_TEST_JUDGE_KEY"\ntimeout_s = 300')
    done = retrain(cfg)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = check_judged(tmp_path / "run" / "logs", 3)
    assert sum(r["judge/requests"] for r in rows) > 0
    assert json.loads((tmp_path / "run" / "logs" / "run_meta.json").read_text())["status"] == "succeeded"
