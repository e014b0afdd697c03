"""`[reward] judge_client = "verifiers"`: the judge asks through verifiers' reference-answer judge
(registered by this distribution in the `retrain.rewards` entry-point group), against a real
server on 127.0.0.1 (the root conftest's `judge_server`): its own template and parsing, and
retrain's retries, fault kinds and counters around it."""

from __future__ import annotations

from typing import Any

import msgspec

from retrain.config.schema import TrainConfig
from retrain.rewards.create import RewardScorer, build_reward
from retrain.rewards.judge.errors import NOT_A_COMPLETION


def judge(url: str, **reward: Any) -> RewardScorer:
    c = TrainConfig()
    values = {"type": "judge", "judge_client": "verifiers", "judge_base_url": url, "judge_model": "grader",
              "timeout_s": 5.0, "judge_retries": 0, **reward}
    scorer = build_reward(msgspec.structs.replace(c, reward=msgspec.structs.replace(c.reward, **values)))
    scorer.reward.backoff_s = 0.01
    return scorer


def score(scorer: RewardScorer) -> Any:
    try:
        return scorer.score_batch(["The answer is 42.", "It is 41."], ["42", "42"], ["What is 6 x 7?"] * 2)
    finally:
        scorer.close()


def test_verifiers_judge_scores_through_its_own_template(judge_server: Any) -> None:
    judge_server.mode = "yes"
    batch = score(judge(judge_server.url))
    assert batch.scores.tolist() == [1.0, 1.0] and batch.errors == 0
    asked = judge_server.requests[0]["messages"][0]["content"]
    assert "What is 6 x 7?" in asked and "42" in asked and asked != ""
    assert batch.metrics()["judge/requests"] == 2.0


def test_verifiers_judge_counts_what_it_cannot_parse(judge_server: Any) -> None:
    judge_server.mode = "The response is incorrect."  # neither label: verifiers raises, retrain counts it
    batch = score(judge(judge_server.url))
    assert batch.errors == 2 and batch.faults[0].kind == NOT_A_COMPLETION
    judge_server.mode, judge_server.fail_first = "503", len(judge_server.requests) + 1  # the next one fails
    batch = score(judge(judge_server.url, judge_retries=1, judge_concurrency=1))
    assert batch.errors == 0 and batch.metrics()["judge/retries"] == 1.0
