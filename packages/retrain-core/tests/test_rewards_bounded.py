"""Reward scoring never stops a run: errors and timeouts score 0 and are counted."""

import sys
import textwrap
import time
from typing import Any

import msgspec
import pytest

from retrain.config.schema import TrainConfig
from retrain.registry.health import module_available
from retrain.rewards.bounded import ProcessPool
from retrain.rewards.create import build_reward
from retrain.rewards.types import RewardUnavailable

PLUGIN = textwrap.dedent("""
    import asyncio, time

    def score(response, reference):
        if response == "hang":
            time.sleep(30)
        if response == "boom":
            raise RuntimeError("boom")
        if response == "nan":
            return float("nan")
        if response == "text":
            return " 0.25 "
        return 1.0 if response == reference else 0.0

    async def ascore(response, reference):
        if response == "hang":
            await asyncio.sleep(30)
        if response == "boom":
            raise ValueError("bad")
        return 1.0 if response == reference else 0

    class Scorer:
        def __init__(self, config=None):
            self.config = config

        def score(self, response, reference):
            return score(response, reference)

    def factory(config):
        return Scorer(config)
""")


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    (tmp_path / "rewardplug.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("rewardplug", None)


def reward_config(**values: Any) -> TrainConfig:
    c = TrainConfig()
    return msgspec.structs.replace(c, reward=msgspec.structs.replace(c.reward, **values))


def test_match_is_inline():
    scorer = build_reward(reward_config(type="match"))
    assert scorer.mode == "inline"
    assert scorer.score_batch(["\\boxed{3}", "x"], ["3", "3"]).scores.tolist() == [1.0, 0.0]
    assert build_reward(reward_config(type="strict")).score("\\boxed{3}}", "3") == 0.0


def test_custom_sync_errors_and_timeouts(plugin_dir):
    scorer = build_reward(
        reward_config(
            type="custom", custom_module="rewardplug", custom_function="score", timeout_s=0.5
        )
    )
    assert scorer.mode == "thread"
    start = time.monotonic()
    batch = scorer.score_batch(
        ["a", "hang", "boom", "nan", "text", "b"], ["a", "x", "x", "x", "x", "b"]
    )
    assert time.monotonic() - start < 5
    assert batch.scores.tolist() == [1.0, 0.0, 0.0, 0.0, 0.25, 1.0]
    assert (batch.errors, batch.timeouts) == (2, 1)
    assert batch.metrics() == {"reward_errors": 2.0, "reward_timeouts": 1.0}
    assert any("boom" in f for f in batch.failures)


def test_custom_async(plugin_dir):
    scorer = build_reward(
        reward_config(
            type="custom", custom_module="rewardplug", custom_function="ascore", timeout_s=0.5
        )
    )
    assert scorer.mode == "async"
    batch = scorer.score_batch(["a", "hang", "boom", "c"], ["a", "x", "x", "d"])
    assert batch.scores.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert (batch.errors, batch.timeouts) == (1, 1)


@pytest.mark.parametrize("target", ["rewardplug.score", "rewardplug.Scorer", "rewardplug.factory"])
def test_dotted_reward_types(plugin_dir, target):
    scorer = build_reward(reward_config(type=target))
    assert scorer.score_batch(["a", "b"], ["a", "c"]).scores.tolist() == [1.0, 0.0]


def test_process_pool_kills_overruns(plugin_dir):
    pool = ProcessPool("rewardplug:Scorer", workers=2, timeout_s=1.0)
    try:
        batch = pool.score_batch([("a", "a"), ("hang", "x"), ("boom", "x"), ("b", "b"), ("c", "d")])
        assert batch.scores.tolist() == [1.0, 0.0, 0.0, 1.0, 0.0]
        assert (batch.errors, batch.timeouts) == (1, 1)
        assert pool.score_batch([("z", "z")]).scores.tolist() == [1.0]  # the pool recovered
    finally:
        pool.close()


def test_process_pool_reports_a_broken_target():
    with pytest.raises(RuntimeError, match="failed to start"):
        ProcessPool("no_such_module_xyz:Reward", workers=1).score_batch([("a", "a")])


@pytest.mark.skipif(not module_available("math_verify"), reason="math-verify not installed")
def test_math_reward():
    scorer = build_reward(reward_config(type="math", timeout_s=20.0), workers=1)
    try:
        batch = scorer.score_batch(
            ["\\boxed{0.5}", "\\boxed{\\frac{2}{4}}", "\\boxed{3}", "none"], ["\\frac{1}{2}"] * 4
        )
        assert batch.scores.tolist() == [1.0, 1.0, 0.0, 0.0]
        assert batch.errors == 0
    finally:
        scorer.close()


def test_unavailable_rewards_say_what_to_install(monkeypatch):
    import retrain.rewards.verifiers as verifiers

    monkeypatch.setattr(verifiers, "module_available", lambda name: False)
    with pytest.raises(RewardUnavailable, match="math-verify"):
        build_reward(reward_config(type="math"))
    with pytest.raises(RewardUnavailable, match="RETRAIN_TEST_UNSET_KEY"):
        build_reward(reward_config(type="judge", judge_api_key_env="RETRAIN_TEST_UNSET_KEY",
                                   judge_base_url="https://judge.example/v1"))
