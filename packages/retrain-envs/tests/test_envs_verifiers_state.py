"""The verifiers environments' state is the order of their tasks: it round-trips through a
checkpoint, so a resumed run whose taskset now loads in another order continues on exactly the
tasks the uninterrupted run would have, and one whose taskset holds other tasks is refused."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from retrain.environments.verifiers.environment import VerifiersEnvironment
from retrain.environments.verifiers.episodes import VerifiersEpisodes
from retrain.environments.verifiers.load import load_tasks
from retrain.errors import UserError
from retrain.training.prompts import PromptCursor
from retrain.types import Completion, SamplingParams

TASKSET = "retrain-fixture-boxed-math"


class CharChat:
    """A chat tokenizer with one id per character."""

    eos_token_ids: tuple[int, ...] = (0,)

    def encode_chat(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True) -> list[int]:
        return self.encode("".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>")

    def encode_prompt(self, text: str) -> list[int]:
        return self.encode(text)

    def encode(self, text: str) -> list[int]:
        return [ord(ch) for ch in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i) for i in ids)

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [chr(i) for i in ids]


class AlwaysSeven:
    """Answers every prompt with \\boxed{7}, so a group's reward says which task it scored."""

    def __init__(self) -> None:
        self.tokenizer = CharChat()

    def sample(self, prompts: Sequence[Sequence[int]], num_samples: int,
               params: SamplingParams) -> list[list[Completion]]:
        ids = self.tokenizer.encode(r"\boxed{7}")
        return [[Completion(token_ids=ids, logprobs=[0.0] * len(ids)) for _ in range(num_samples)] for _ in prompts]


SAMPLING = SamplingParams(max_tokens=8)


def steps(env: VerifiersEnvironment, cursor: PromptCursor, n: int) -> list[list[Any]]:
    """What n steps of 3 prompts train on: prompt ids, the logged example, rewards."""
    backend = AlwaysSeven()
    out = []
    for _ in range(n):
        batch = cursor.take(3)
        rollouts = env.collect(backend, batch, group_size=2, sampling=SAMPLING)  # type: ignore[arg-type]
        out.append([(ids, g.example.prompt, g.example.example_id, g.rewards.tolist())
                    for (_, ids), g in zip(batch, rollouts.groups, strict=True)])
    return out


def checkpointed(state: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(json.dumps(state))
    return loaded


def test_a_resumed_environment_continues_where_the_uninterrupted_one_would() -> None:
    tasks, _ = load_tasks(TASKSET, {"num_tasks": 10, "seed": 3})
    tok = CharChat()
    first = VerifiersEnvironment(TASKSET, tasks, 2)
    cursor = PromptCursor(first.examples(), tok, encode=first.encode)  # type: ignore[arg-type]
    steps(first, cursor, 2)
    state, index = checkpointed(first.state()), cursor.index
    uninterrupted = steps(first, cursor, 3)

    # the taskset loads its tasks in another order on resume (each stamped with its new position)
    moved = [t.with_data(idx=i) for i, t in enumerate(reversed(tasks))]
    resumed = VerifiersEnvironment(TASKSET, moved, 2)
    examples = list(resumed.examples())  # the trainer keeps these, read before load_state
    resumed.load_state(state)
    again = PromptCursor(examples, tok, start=index, encode=resumed.encode)  # type: ignore[arg-type]
    assert steps(resumed, again, 3) == uninterrupted
    assert resumed.state() == state


def test_a_taskset_with_other_tasks_is_refused_by_name() -> None:
    tasks, _ = load_tasks(TASKSET, {"num_tasks": 6, "seed": 3})
    state = checkpointed(VerifiersEnvironment(TASKSET, tasks, 1).state())
    other, _ = load_tasks(TASKSET, {"num_tasks": 6, "seed": 4})
    with pytest.raises(UserError, match=rf"\[environment\] id '{TASKSET}': the taskset no longer holds task"):
        VerifiersEnvironment(TASKSET, other, 1).load_state(state)
    fewer, _ = load_tasks(TASKSET, {"num_tasks": 5, "seed": 3})
    with pytest.raises(UserError, match="resuming would train on other problems"):
        VerifiersEnvironment(TASKSET, fewer, 1).load_state(state)


def test_multi_turn_episodes_restore_the_order_too() -> None:
    tasks, _ = load_tasks(TASKSET, {"num_tasks": 6, "seed": 3})
    state = checkpointed(VerifiersEpisodes(TASKSET, None, tasks, 1).state())
    resumed = VerifiersEpisodes(TASKSET, None, list(reversed(tasks)), 1)
    handles = list(resumed.examples())
    resumed.load_state(state)
    tok = CharChat()
    original = VerifiersEpisodes(TASKSET, None, tasks, 1)
    assert [resumed.encode(h, tok) for h in handles] == [original.encode(h, tok) for h in original.examples()]


def test_a_checkpoint_from_before_the_order_was_saved_still_loads() -> None:
    tasks, _ = load_tasks(TASKSET, {"num_tasks": 4})
    env = VerifiersEnvironment(TASKSET, tasks, 1)
    env.load_state({})
    assert env.state()["task_order"] and len(env.state()["task_order"]) == 4
