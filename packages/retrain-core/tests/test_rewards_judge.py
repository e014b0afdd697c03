"""The LLM judge (`[reward] type = "judge"`) against a real HTTP server on 127.0.0.1 (the root
conftest's `judge_server`): the verdict rule, the request it sends, bounded concurrency, retries
with backoff for what may pass and none for what will not, timeouts, replies that are not chat
completions, and the cache of verdicts that a resumed run reads back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from retrain.config.schema import TrainConfig
from retrain.io.layout import JUDGE_CACHE
from retrain.rewards.create import RewardScorer, build_reward
from retrain.rewards.judge.errors import NOT_A_COMPLETION, REQUEST_REFUSED
from retrain.rewards.judge.verdict import verdict_of
from retrain.rewards.types import RewardUnavailable

ITEMS = [("The answer is 42.", "42"), ("It is 41.", "42"), ("7", "7")]
PROMPTS = ["What is 6 x 7?", "What is 6 x 7?", "What is 3 + 4?"]


def judge(url: str, cache_dir: Path | None = None, **reward: Any) -> RewardScorer:
    c = TrainConfig()
    values = {"type": "judge", "judge_base_url": url, "judge_model": "grader", "timeout_s": 30.0,
              "judge_retries": 0, **reward}
    c = msgspec.structs.replace(c, reward=msgspec.structs.replace(c.reward, **values))
    scorer = build_reward(c, cache_dir=str(cache_dir) if cache_dir is not None else None)
    scorer.reward.backoff_s = 0.01
    return scorer


def score(scorer: RewardScorer, items: list[tuple[str, str]] = ITEMS, prompts: list[str] = PROMPTS) -> Any:
    try:
        return scorer.score_batch([r for r, _ in items], [ref for _, ref in items], prompts)
    finally:
        scorer.close()


def test_verdict_is_yes_in_the_lower_cased_reply_and_other_replies_are_counted() -> None:
    assert verdict_of("Yes.").score == 1.0 and verdict_of("I'd say YES").score == 1.0
    assert verdict_of("No").score == 0.0 and verdict_of("no, it is not").clear
    unclear = verdict_of("The response is incorrect.")
    assert unclear.score == 0.0 and not unclear.clear


def test_the_request_carries_the_question_the_key_and_temperature_zero(judge_server: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RETRAIN_TEST_JUDGE_KEY", "sk-test-secret")
    batch = score(judge(judge_server.url, judge_api_key_env="RETRAIN_TEST_JUDGE_KEY"))
    assert batch.scores.tolist() == [1.0, 1.0, 1.0] and batch.errors == 0
    body = judge_server.requests[0]
    assert body["model"] == "grader" and body["temperature"] == 0
    (message,) = body["messages"]
    assert message["role"] == "user"
    asked = [m["messages"][0]["content"] for m in judge_server.requests]
    (second,) = [q for q in asked if "It is 41." in q]
    assert "Question:\nWhat is 6 x 7?" in second and "Reference answer:\n42" in second
    assert all(h["Authorization"] == "Bearer sk-test-secret" for h in judge_server.headers)
    assert batch.metrics()["judge/requests"] == 3.0 and batch.metrics()["judge/latency_s"] > 0


def test_unclear_replies_score_zero_and_are_counted_not_failed(judge_server: Any) -> None:
    judge_server.mode = "The response is incorrect."
    batch = score(judge(judge_server.url))
    assert batch.scores.tolist() == [0.0, 0.0, 0.0] and batch.errors == 0
    assert batch.metrics()["judge/unclear"] == 3.0


def test_garbage_is_an_error_and_is_not_retried(judge_server: Any) -> None:
    judge_server.mode = "garbage"
    batch = score(judge(judge_server.url, judge_retries=3))
    assert batch.errors == 3 and batch.timeouts == 0 and batch.scores.tolist() == [0.0] * 3
    assert len(judge_server.requests) == 3  # one each: garbage does not turn into an answer
    (fault,) = batch.faults
    assert fault.kind == NOT_A_COMPLETION and "<html>" in fault.message


def test_a_refused_request_is_not_retried_and_never_quotes_the_key(judge_server: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RETRAIN_TEST_JUDGE_KEY", "sk-test-secret")
    judge_server.mode = "401"
    batch = score(judge(judge_server.url, judge_retries=3, judge_api_key_env="RETRAIN_TEST_JUDGE_KEY"))
    assert batch.errors == 3 and len(judge_server.requests) == 3
    assert batch.faults[0].kind == REQUEST_REFUSED and "HTTP 401" in batch.faults[0].message
    assert "sk-test-secret" not in json.dumps([f.message for f in batch.faults] + batch.failures)


def test_a_server_error_is_retried_with_backoff_then_answers(judge_server: Any) -> None:
    judge_server.mode, judge_server.fail_first = "503", 2
    batch = score(judge(judge_server.url, judge_retries=2, judge_concurrency=1))
    assert batch.errors == 0 and batch.scores.tolist() == [1.0, 1.0, 1.0]
    m = batch.metrics()
    assert m["judge/requests"] == 5.0 and m["judge/retries"] == 2.0


def test_a_stalled_judge_times_out_each_try_and_is_counted(judge_server: Any) -> None:
    judge_server.mode, judge_server.stall_s = "stall", 3.0
    batch = score(judge(judge_server.url, timeout_s=0.3, judge_retries=1))
    assert batch.timeouts == 3 and batch.errors == 0 and batch.scores.tolist() == [0.0] * 3
    assert len(judge_server.requests) == 6  # each item: a try and one retry, each cut at 0.3 s
    assert batch.faults[0].kind == "a judge that did not answer"


def test_an_unreachable_judge_is_counted_after_its_retries() -> None:
    batch = score(judge("http://127.0.0.1:9/v1", judge_retries=1))
    assert batch.errors == 3 and batch.metrics()["judge/requests"] == 6.0
    assert batch.faults[0].kind == "a judge that could not be reached"


def test_concurrency_is_bounded(judge_server: Any) -> None:
    judge_server.delay_s = 0.1
    items = [(f"answer {i}", str(i)) for i in range(8)]
    batch = score(judge(judge_server.url, judge_concurrency=2), items, [f"q{i}" for i in range(8)])
    assert batch.errors == 0 and len(judge_server.requests) == 8
    assert 1 <= judge_server.most_busy <= 2


def test_verdicts_are_cached_on_disk_and_read_back(judge_server: Any, tmp_path: Path) -> None:
    first = score(judge(judge_server.url, tmp_path))
    assert len(judge_server.requests) == 3 and first.metrics()["judge/cache_hits"] == 0
    lines = (tmp_path / JUDGE_CACHE).read_text().splitlines()
    assert len(lines) == 3 and all(set(json.loads(line)) == {"key", "score"} for line in lines)
    with (tmp_path / JUDGE_CACHE).open("a") as f:
        f.write('{"key": "torn')  # a crash mid-line: cut when the cache is opened
    judge_server.mode = "no"  # a second opinion would differ: the cached verdict stands
    again = score(judge(judge_server.url, tmp_path))
    assert again.scores.tolist() == first.scores.tolist() and len(judge_server.requests) == 3
    assert again.metrics()["judge/cache_hits"] == 3.0
    changed = score(judge(judge_server.url, tmp_path), [("The answer is 42.", "42")], ["another prompt"])
    assert changed.scores.tolist() == [0.0] and len(judge_server.requests) == 4  # keyed by the prompt too
    assert (tmp_path / JUDGE_CACHE).read_text().endswith("\n")


def test_failures_are_not_cached(judge_server: Any, tmp_path: Path) -> None:
    judge_server.mode = "garbage"
    score(judge(judge_server.url, tmp_path))
    assert not (tmp_path / JUDGE_CACHE).exists()


def test_an_empty_response_scores_zero_without_a_request(judge_server: Any) -> None:
    batch = score(judge(judge_server.url), [("  ", "42")], ["q"])
    assert batch.scores.tolist() == [0.0] and not judge_server.requests and batch.errors == 0


def test_a_remote_judge_needs_its_key_and_a_local_one_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RETRAIN_TEST_JUDGE_KEY", raising=False)
    with pytest.raises(RewardUnavailable, match=r"\$RETRAIN_TEST_JUDGE_KEY is not set"):
        judge("https://judge.example/v1", judge_api_key_env="RETRAIN_TEST_JUDGE_KEY")
    judge("http://localhost:8000/v1", judge_api_key_env="RETRAIN_TEST_JUDGE_KEY").close()
