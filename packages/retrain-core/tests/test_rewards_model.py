"""The reward model (`[reward] type = "model"`) behind a server, against a real HTTP server on
127.0.0.1 that answers vLLM's /classify contract (the root conftest's `rm_server`; the real
vLLM runs in the slow tier): the
request it sends, the normalisation of the logits, batching, the cache a resumed run reads back,
and faults: a server error retried with backoff, garbage and refusals counted, not retried, a
stall timed out, each counted in reward_errors / reward_timeouts (the error budget's input)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec
import pytest

from retrain.config.schema import TrainConfig
from retrain.io.layout import REWARD_MODEL_CACHE
from retrain.rewards.create import RewardScorer, build_reward
from retrain.rewards.model.scorer import normalise, render
from retrain.rewards.model.server import NOT_CLASSIFIED

ITEMS = [("\\boxed{12}", "12"), ("no digits", "3"), ("7", "7"), ("1 2 3 4", "10")]
PROMPTS = ["5+7=", "1+2=", "3+4=", "1+2+3+4="]


def reward(url: str, cache_dir: Path | None = None, **values: Any) -> RewardScorer:
    c = TrainConfig()
    settings = {"type": "model", "model": "rm", "model_url": url, "timeout_s": 5.0, "judge_retries": 0,
                "model_batch_size": 3, **values}
    c = msgspec.structs.replace(c, reward=msgspec.structs.replace(c.reward, **settings))
    scorer = build_reward(c, cache_dir=str(cache_dir) if cache_dir is not None else None)
    scorer.reward.backoff_s = 0.01
    return scorer


def score(scorer: RewardScorer, items: list[tuple[str, str]] = ITEMS, prompts: list[str] = PROMPTS) -> Any:
    try:
        return scorer.score_batch([r for r, _ in items], [ref for _, ref in items], prompts)
    finally:
        scorer.close()


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_the_normalisations_are_what_the_docs_say() -> None:
    assert normalise([0.0], "sigmoid", -1) == 0.5 and normalise([40.0], "sigmoid", -1) == pytest.approx(1.0)
    assert normalise([-3.5], "logit", -1) == -3.5
    assert normalise([1.0, 2.0, 3.0], "softmax", -1) == pytest.approx(math.exp(3) / (math.e + math.e ** 2 + math.e ** 3))
    assert normalise([1.0, 2.0, 3.0], "softmax", 0) == pytest.approx(math.e / (math.e + math.e ** 2 + math.e ** 3))
    with pytest.raises(ValueError, match="one-label head"):
        normalise([1.0, 2.0], "sigmoid", -1)
    assert render("Q: {prompt}\nA: {response} {x}", "1+{1}", "2") == "Q: 1+{1}\nA: 2 {x}"


def test_texts_go_in_batches_with_the_key_and_come_back_normalised(rm_server: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RETRAIN_TEST_RM_KEY", "sk-rm-secret")
    batch = score(reward(rm_server.url, model_api_key_env="RETRAIN_TEST_RM_KEY"))
    texts = [f"{p}\n{r}" for p, (r, _) in zip(PROMPTS, ITEMS, strict=True)]
    assert batch.errors == 0 and batch.scores.tolist() == pytest.approx([sigmoid(rm_server.logit(t)) for t in texts])
    # model_batch_size = 3; the two requests are in flight at once, so they arrive in either order
    assert sorted(len(r["input"]) for r in rm_server.requests) == [1, 3]
    assert all(r["path"] == "/classify" and r["model"] == "rm" and r["use_activation"] is False
               for r in rm_server.requests)
    assert sorted(t for r in rm_server.requests for t in r["input"]) == sorted(texts)
    assert all(h["Authorization"] == "Bearer sk-rm-secret" for h in rm_server.headers)
    m = batch.metrics()
    assert m["reward_model/requests"] == 2.0 and m["reward_model/cache_hits"] == 0.0 and m["reward_model/latency_s"] > 0


def test_softmax_reads_the_chosen_label(rm_server: Any) -> None:
    rm_server.labels = 3
    batch = score(reward(rm_server.url, model_score="softmax", model_label=0, model_template="{response}"))
    assert batch.scores.tolist() == pytest.approx([math.exp(0) / sum(math.exp(k) for k in range(3))] * 4)
    rm_server.requests.clear()
    bad = score(reward(rm_server.url))  # sigmoid of a three-label head: every text is counted
    assert bad.errors == 4 and "one-label head" in bad.faults[0].message


def test_the_cache_answers_a_resumed_run(rm_server: Any, tmp_path: Path) -> None:
    first = score(reward(rm_server.url, tmp_path))
    assert len((tmp_path / REWARD_MODEL_CACHE).read_text().splitlines()) == 4
    rm_server.requests.clear()
    again = score(reward(rm_server.url, tmp_path))
    assert again.scores.tolist() == first.scores.tolist() and rm_server.requests == []
    assert again.metrics()["reward_model/cache_hits"] == 4.0


def test_a_server_error_is_retried_with_backoff_then_answers(rm_server: Any) -> None:
    rm_server.mode, rm_server.fail_first = "503", 2
    batch = score(reward(rm_server.url, judge_retries=2, judge_concurrency=1))
    assert batch.errors == 0 and batch.metrics()["reward_model/retries"] == 2.0
    assert batch.metrics()["reward_model/requests"] == 4.0


@pytest.mark.parametrize(("mode", "kind"), [("garbage", NOT_CLASSIFIED),
                                             ("401", "a reward model request the server refused")])
def test_garbage_and_refusals_are_errors_and_are_not_retried(rm_server: Any, mode: str, kind: str) -> None:
    rm_server.mode = mode
    batch = score(reward(rm_server.url, judge_retries=3))
    assert batch.errors == 4 and batch.timeouts == 0 and batch.scores.tolist() == [0.0] * 4
    assert len(rm_server.requests) == 2  # one per batch of texts
    assert batch.faults[0].kind == kind


def test_a_stalled_server_times_out_and_an_absent_one_is_counted(rm_server: Any) -> None:
    rm_server.mode, rm_server.stall_s = "stall", 3.0
    batch = score(reward(rm_server.url, timeout_s=0.3, judge_retries=1))
    assert batch.timeouts == 4 and batch.errors == 0 and len(rm_server.requests) == 4
    assert batch.faults[0].kind == "a reward model that did not answer"
    gone = score(reward("http://127.0.0.1:9", judge_retries=0))
    assert gone.errors == 4 and gone.faults[0].kind == "a reward model that could not be reached"
