"""The producer sampling ahead (retrain.training.producer): which version each batch samples, the
data cursor a checkpoint saves, the environment's saved state, stale groups dropped, errors of
the sampling thread, and rank 0 sampling for a world. A scripted backend, no torch."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from retrain.advantages.pipeline import build_pipeline
from retrain.backends.protocol import LeaderSampler, VersionedSampler
from retrain.config.schema import AlgorithmConfig, TrainConfig, TrainingConfig
from retrain.process.world import World
from retrain.rewards.types import RewardBatch
from retrain.rollout.group import Group, StepRollouts
from retrain.training.backpressure import build_backpressure
from retrain.training.flow import Flow
from retrain.training.producer import RolloutProducer
from retrain.training.prompts import PromptCursor
from retrain.training.sepa import SepaController
from retrain.types import Completion, Example, SamplingParams

BATCH, GROUP = 2, 2


class Tokenizer:
    eos_token_ids: tuple[int, ...] = (0,)

    def encode_prompt(self, text: str) -> list[int]:
        return [ord(ch) for ch in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i) for i in ids)

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [chr(i) for i in ids]


class Versioned:
    """Publishes versions and records, per sampling call, (batch id, version asked for); a call
    whose batch id is in `gates` waits for its event first."""

    def __init__(self, gates: Mapping[int, threading.Event] | None = None, fail_at: int | None = None) -> None:
        self.tokenizer = Tokenizer()
        self.published: list[tuple[int, int]] = []
        self.calls: list[tuple[int | None, int | None]] = []
        self.gates, self.fail_at = dict(gates or {}), fail_at

    def checkpoint(self, name: str) -> None:
        raise AssertionError("a versioned backend is published to by version")

    def publish(self, version: int, *, keep: int) -> None:
        self.published.append((version, keep))

    def sample(self, prompts: Sequence[Sequence[int]], num_samples: int,
               params: SamplingParams) -> list[list[Completion]]:
        gate = self.gates.get(params.batch_id or 0)
        if gate is not None:
            assert gate.wait(60)
        if params.batch_id == self.fail_at:
            raise RuntimeError("the server went away")
        self.calls.append((params.batch_id, params.policy_version))
        return [[Completion(token_ids=[ord("y"), 1], logprobs=[-0.5, -0.5]) for _ in range(num_samples)]
                for _ in prompts]


class Reward:
    def score_batch(self, responses: Sequence[str], references: Sequence[str]) -> RewardBatch:
        return RewardBatch(np.asarray([float(i % 2) for i in range(len(responses))]))


class CountingEnvironment:
    """An environment whose state counts the batches it collected."""

    def __init__(self, backend: Versioned) -> None:
        self.collected = 0

    def examples(self) -> list[Example]:
        return [Example(prompt="p0")]

    def state(self) -> dict[str, Any]:
        return {"collected": self.collected}

    def collect(self, backend: Any, batch: Sequence[tuple[Example, list[int]]], *, group_size: int,
                sampling: SamplingParams) -> StepRollouts:
        comps = backend.sample([ids for _, ids in batch], group_size, sampling)
        self.collected += 1
        groups = [Group(ex, ids, cs, ["y"] * len(cs), np.asarray([1.0, 0.0][:len(cs)]))
                  for (ex, ids), cs in zip(batch, comps, strict=True)]
        return StepRollouts(groups, 0.0, 0.0)


def flow(environment: Any = None) -> Flow:
    c = TrainConfig(algorithm=AlgorithmConfig(advantage_mode="grpo", transform_mode="none"),
                    training=TrainingConfig(max_tokens=4))
    return Flow(pipeline=build_pipeline(c), sepa=SepaController.from_config(c), backpressure=build_backpressure(c),
                reward=Reward(), detector=None, sampling=SamplingParams(max_tokens=4), environment=environment)


def producer(backend: Any, level: int, steps: int = 6, **kw: Any) -> tuple[RolloutProducer, PromptCursor]:
    cursor = PromptCursor([Example(prompt=f"p{i}") for i in range(5)], backend.tokenizer)
    env = kw.pop("environment", None)
    return RolloutProducer(backend, flow(env), cursor, level=level, max_steps=steps, **kw), cursor


def test_the_fake_backends_implement_the_optional_protocols() -> None:
    assert isinstance(Versioned(), VersionedSampler)
    assert isinstance(Shared(World(0, 2), Versioned()), LeaderSampler)


def test_pinned_batches_sample_exactly_k_versions_behind_and_the_cursor_excludes_those_in_flight() -> None:
    backend = Versioned()
    p, cursor = producer(backend, level=2)
    try:
        out = []
        for step in range(6):
            out.append(p.next(step, (BATCH, GROUP)))
            # the checkpointed cursor ends at the batches trained, whatever the thread ran ahead to
            assert p.committed_index == BATCH * (step + 1)
            assert cursor.index >= p.committed_index
    finally:
        p.close()
    assert [r.policy_version for r in out] == [0, 0, 0, 1, 2, 3]
    assert sorted(backend.calls) == [(BATCH * j, max(j - 2, 0)) for j in range(6)]
    assert backend.published == [(v, 2) for v in range(6)]
    assert [r.producer_metrics["async/policy_lag"] for r in out] == [0, 1, 2, 2, 2, 2]
    assert [r.producer_metrics["async/staleness_max"] for r in out] == [0, 1, 2, 2, 2, 2]
    assert all(r.producer_metrics["async/dropped_samples"] == 0 for r in out)
    assert all(k in out[1].producer_metrics for k in ("async/wait_s", "async/weight_sync_s", "async/trainer_idle_s"))


def test_level_0_publishes_then_samples_the_step_from_its_own_version() -> None:
    backend = Versioned()
    p, _ = producer(backend, level=0)
    out = [p.next(step, (BATCH, GROUP)) for step in range(3)]
    p.close()
    assert backend.calls == [(0, 0), (2, 1), (4, 2)] and backend.published == [(0, 0), (1, 0), (2, 0)]
    assert [r.producer_metrics["async/policy_lag"] for r in out] == [0, 0, 0]
    assert "async/staleness_max" not in out[0].producer_metrics and p.committed_index == 6


def test_latest_versions_take_the_newest_published_when_a_batch_starts() -> None:
    # batch 1 (batch id 2) is held until step 1 has published version 1; batch 2 starts after it
    gate = threading.Event()
    for versions, want in (("pinned", 0), ("latest", 1)):
        gate.clear()
        backend = Versioned(gates={2: gate})
        p, _ = producer(backend, level=2, steps=3, versions=versions)
        try:
            p.next(0, (BATCH, GROUP))
            taker = threading.Thread(target=p.next, args=(1, (BATCH, GROUP)))
            taker.start()
            while (1, 2) not in backend.published:
                time.sleep(0.01)
            gate.set()
            taker.join()
            assert p.next(2, (BATCH, GROUP)).policy_version == want, versions
        finally:
            gate.set()
            p.close()


def test_groups_sampled_too_long_ago_are_dropped_and_counted() -> None:
    p, _ = producer(Versioned(), level=2, steps=3, max_off_policy_steps=1)
    try:
        out = [p.next(step, (BATCH, GROUP)) for step in range(3)]
    finally:
        p.close()
    assert [r.producer_metrics["async/dropped_samples"] for r in out] == [0, 0, BATCH * GROUP]
    assert all(g.dropped.startswith("stale (sampled 2 updates behind") for g in out[2].groups)
    assert not any(g.dropped for r in out[:2] for g in r.groups)


def test_token_versions_set_the_staleness_and_the_oldest_token_decides_a_drop() -> None:
    p, _ = producer(Versioned(), level=2, steps=1, max_off_policy_steps=1)
    old = Completion(token_ids=[1, 2, 3, 4], logprobs=[0.0] * 4, versions=[0, 0, 3, 3])
    new = Completion(token_ids=[1, 2], logprobs=[0.0] * 2)  # the batch's version, 2
    groups = [Group(Example(prompt="a"), [97], [old, new], ["", ""], np.zeros(2)),
              Group(Example(prompt="b"), [98], [new, new], ["", ""], np.zeros(2))]
    rollouts = StepRollouts(groups, 0.0, 0.0, policy_version=2)
    metrics = p._stale(rollouts, step=3)
    # token lags: 3, 3, 0, 0 and 1, 1; then 1, 1, 1, 1
    assert metrics == {"async/staleness_mean": 1.2, "async/staleness_max": 3.0, "async/dropped_samples": 2.0}
    assert rollouts.groups[0].dropped and not rollouts.groups[1].dropped


def test_a_checkpoint_saves_the_environment_as_it_was_after_the_batches_trained() -> None:
    backend = Versioned()
    env = CountingEnvironment(backend)
    p, _ = producer(backend, level=3, steps=6, environment=env)
    try:
        for step in range(3):
            p.next(step, (BATCH, GROUP))
            while env.collected < min(step + 4, 6):  # the thread runs ahead, up to the last batch
                time.sleep(0.01)
            saved = p.checkpoint_flow(p.flow).environment
            assert saved.state() == {"collected": step + 1} and env.state()["collected"] > step + 1
            assert saved.examples() == env.examples()  # everything else is the environment's
    finally:
        p.close()


def test_an_error_of_the_sampling_thread_is_raised_at_its_step() -> None:
    p, _ = producer(Versioned(fail_at=2), level=2, steps=4)
    try:
        p.next(0, (BATCH, GROUP))
        with pytest.raises(RuntimeError, match="the server went away"):
            p.next(1, (BATCH, GROUP))
    finally:
        p.close()


class Shared(Versioned):
    """A rank of a world whose rank 0 samples: broadcast hands out what `leader` gave."""

    def __init__(self, world: World, leader: Versioned, given: Any = None) -> None:
        super().__init__()
        self.world, self.leader, self.given = world, leader, given
        self.leader_samples = True
        self.shared: list[Any] = []

    def broadcast(self, obj: Any) -> Any:
        self.shared.append(obj)
        return obj if self.world.leader else self.given


def test_rank_0_samples_for_the_world_and_the_others_take_its_batches() -> None:
    leader = Shared(World(0, 2), Versioned())
    p, _ = producer(leader, level=2, steps=2, world=World(0, 2))
    try:
        first = p.next(0, (BATCH, GROUP))
    finally:
        p.close()
    assert leader.calls and leader.shared[0][0] is first and leader.shared[0][1] == BATCH
    follower = Shared(World(1, 2), Versioned(), given=(first, 7, None))
    q, cursor = producer(follower, level=2, steps=2, world=World(1, 2))
    try:
        got = q.next(0, (BATCH, GROUP))
    finally:
        q.close()
    assert got is first and not follower.calls and cursor.index == 0 and q.committed_index == 7
    assert follower.published == [(0, 2)]  # every rank publishes: gathering the weights is collective
