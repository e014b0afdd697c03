"""The judge's `[reward] timeout_s` is a whole-request deadline and its reply has a size cap:
a judge on 127.0.0.1 that drips its reply (each socket wait short, the reply slow), drips its
headers, sends a body without end or declares one of 10 GB fails that request within the
deadline, counted as the fault it is, and the batch goes on."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest
from faulty_http import FaultyServer

from retrain.config.schema import TrainConfig
from retrain.rewards.create import RewardScorer, build_reward
from retrain.rewards.judge.endpoint import MAX_REPLY_BYTES


def judge(url: str, **reward: Any) -> RewardScorer:
    c = TrainConfig()
    values = {"type": "judge", "judge_base_url": url + "/v1", "judge_model": "grader", "judge_retries": 0, **reward}
    return build_reward(msgspec.structs.replace(c, reward=msgspec.structs.replace(c.reward, **values)))


def scored(scorer: RewardScorer) -> tuple[Any, float]:
    t0 = time.monotonic()
    try:
        return scorer.score_batch(["The answer is 42."], ["42"], ["What is 6 x 7?"]), time.monotonic() - t0
    finally:
        scorer.close()


@pytest.mark.parametrize("mode", ["drip", "drip_head"])
def test_a_dripping_judge_is_cut_at_the_deadline(mode: str) -> None:
    # 0.2 s between bytes: no single wait comes near timeout_s, the whole reply takes 60-90 s
    with FaultyServer(mode, drip_s=0.2) as server:
        batch, took = scored(judge(server.url, timeout_s=1.0))
    assert took < 10.0, f"the request took {took:.1f} s under timeout_s = 1"
    assert batch.timeouts == 1 and batch.errors == 0 and batch.scores.tolist() == [0.0]
    (fault,) = batch.faults
    assert fault.kind == "a judge that did not answer" and "within 1 s" in fault.message


@pytest.mark.parametrize("mode", ["endless", "huge"])
def test_a_judge_reply_past_the_size_cap_fails_at_once(mode: str) -> None:
    with FaultyServer(mode) as server:
        batch, took = scored(judge(server.url, timeout_s=30.0, judge_retries=2))
    assert took < 10.0
    assert batch.errors == 1 and batch.timeouts == 0
    (fault,) = batch.faults
    assert f"larger than {MAX_REPLY_BYTES >> 20} MiB" in fault.message, fault.message
    assert fault.kind == "a judge reply that is not a chat completion"


def test_each_retry_gets_its_own_deadline() -> None:
    with FaultyServer("drip", drip_s=0.2) as server:
        batch, took = scored(judge(server.url, timeout_s=0.5, judge_retries=2))
        tries = len(server.requests)
    assert batch.timeouts == 1 and tries == 3
    # 3 x 0.5 s of requests and 0.5 + 1 s of backoff, against 3 x 60 s held
    assert took < 10.0, took


def test_the_verifiers_client_is_cut_at_the_deadline_too() -> None:
    with FaultyServer("drip", drip_s=0.2) as server:
        batch, took = scored(judge(server.url, timeout_s=1.0, judge_client="verifiers"))
    assert took < 10.0, f"the request took {took:.1f} s under timeout_s = 1"
    assert batch.timeouts == 1 and batch.faults[0].kind == "a judge that did not answer"
