"""The verifiers provider's `Environment` (retrain.environments.protocol) for single-turn tasks;
multi-turn tasksets (their own `vf.Env`) go to retrain.environments.verifiers.episodes.

Each task becomes an `Example` (prompt text, answer as reference, the taskset id as task,
its `idx` as example id), in the taskset's order, which is the environment's state
(retrain.environments.verifiers.order); prompts render through the chat template with the task's system
prompt; a step samples `group_size` completions per prompt in one backend call and scores
them with the task's own rewards.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from retrain.backends.protocol import Tokenizer, TrainBackend
from retrain.config.schema import TrainConfig
from retrain.environments.chat import chat_tokenizer, prompt_ids
from retrain.environments.concurrency import EnvClock
from retrain.environments.verifiers.episodes import VerifiersEpisodes
from retrain.environments.verifiers.load import load_tasks
from retrain.environments.verifiers.order import TaskOrder
from retrain.environments.verifiers.prompt import messages
from retrain.environments.verifiers.score import score
from retrain.rollout.group import Group, StepRollouts
from retrain.rollout.sample import sample_texts
from retrain.types import Example, SamplingParams


class VerifiersEnvironment:
    def __init__(self, taskset_id: str, tasks: Sequence[Any], workers: int) -> None:
        self.taskset_id = taskset_id
        self.order = TaskOrder(taskset_id, tasks)
        self.workers = workers

    def examples(self) -> Sequence[Example]:
        return self.order.examples

    def encode(self, example: Example, tokenizer: Tokenizer) -> list[int]:
        return prompt_ids(chat_tokenizer(tokenizer), messages(self.order.task(example)))

    def open(self, backend: TrainBackend) -> None:
        chat_tokenizer(backend.tokenizer)

    def collect(self, backend: TrainBackend, batch: Sequence[tuple[Example, list[int]]], *, group_size: int,
                sampling: SamplingParams) -> StepRollouts:
        samples, texts, sample_s = sample_texts(backend, batch, group_size, sampling)
        t0 = time.perf_counter()
        clock = EnvClock()
        pairs = [(self.order.task(ex), text) for (ex, _), group in zip(batch, texts, strict=True) for text in group]
        scores = score(pairs, self.workers, clock)
        rewards = np.asarray(scores.rewards, dtype=np.float64)
        groups = [Group(self.order.example(ex), ids, list(comps), list(txts),
                        rewards[i * group_size:(i + 1) * group_size])
                  for i, ((ex, ids), comps, txts) in enumerate(zip(batch, samples, texts, strict=True))]
        env = {**scores.metrics(), "env/score_s": round(clock.wall_s, 6), "env/env_wall_s": round(clock.wall_s, 6),
               "env/env_s": round(clock.busy_s, 6)}
        return StepRollouts(groups, sample_s, time.perf_counter() - t0, env_metrics=env)

    def state(self) -> dict[str, Any]:
        return self.order.state()

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.order.load_state(state)

    def close(self) -> None:
        return None


def create_environment(config: TrainConfig) -> VerifiersEnvironment | VerifiersEpisodes:
    env = config.environment
    tasks, vf_env = load_tasks(env.id, env.args, env.max_turns, env.max_episode_tokens)
    if vf_env is not None:
        return VerifiersEpisodes(env.id, vf_env, tasks, env.rollout_env_workers)
    return VerifiersEnvironment(env.id, tasks, env.rollout_env_workers)
