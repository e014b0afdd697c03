"""The environment providers' parts without a model: action parsing, observation tokens from
the chat template, TL-GRPO's turn advantages, [environment] args, concurrency timing."""

from __future__ import annotations

import asyncio
import time

import pytest

from retrain.environments.chat import observation_ids
from retrain.environments.concurrency import EnvClock, bounded
from retrain.environments.openenv.actions import (
    ActionParseError,
    corrective_message,
    parse_action,
    text_field,
)
from retrain.environments.openenv.settings import parse
from retrain.environments.openenv.tl_grpo import turn_advantages
from retrain.errors import UserError
from retrain.validation.load import load_config

TEXT_SCHEMA = {"type": "object", "properties": {"message": {"type": "string"}, "metadata": {"type": "object"}},
               "required": ["message"]}
INT_SCHEMA = {"type": "object", "properties": {"guess": {"type": "integer"}}, "required": ["guess"]}


def test_actions_parse_against_the_schema() -> None:
    assert parse_action('{"guess": 5}', INT_SCHEMA) == {"guess": 5}
    assert parse_action('```json\n{"guess": 5}\n```', INT_SCHEMA) == {"guess": 5}
    assert parse_action("  I say 7 ", TEXT_SCHEMA) == {"message": "I say 7"}
    assert text_field(TEXT_SCHEMA) == "message" and text_field(INT_SCHEMA) is None
    with pytest.raises(ActionParseError):
        parse_action("five", INT_SCHEMA)
    with pytest.raises(ActionParseError):
        parse_action("[5]", INT_SCHEMA)
    msg = corrective_message(INT_SCHEMA, "guess: must be <= 10")
    assert "not a valid action" in msg and "Server detail: guess: must be <= 10" in msg


class TinyChat:
    """The tiny model's template, as text: <bos><|role|>content, <eos> after assistant turns."""

    EOS = 2

    def __init__(self) -> None:
        from retrain.models.load import ModelSpec, load_tokenizer

        self.hf = load_tokenizer(ModelSpec("tiny", "", True, False, ()))

    def encode_chat(self, messages, *, add_generation_prompt=True):  # type: ignore[no-untyped-def]
        return list(self.hf.apply_chat_template(list(messages), add_generation_prompt=add_generation_prompt,
                                                tokenize=True, return_dict=False))


def test_observation_ids_extend_the_sampled_tokens_exactly() -> None:
    pytest.importorskip("retrain.models", reason="needs retrain-backends-local (the workspace suite runs this)")
    tok = TinyChat()
    history = [{"role": "user", "content": "guess"}]
    new = [{"role": "user", "content": "lower"}]
    full = tok.encode_chat([*history, {"role": "assistant", "content": "7"}, *new])
    prompt = tok.encode_chat(history)
    reply = tok.hf.encode("7", add_special_tokens=False)
    # the policy sampled its end-of-turn token: the observation starts after it
    obs = observation_ids(tok, history, "7", [*reply, TinyChat.EOS], new)
    assert obs is not None and prompt + reply + [TinyChat.EOS] + obs == full
    # cut by max_tokens: the template's end-of-turn token leads the observation
    obs = observation_ids(tok, history, "7", reply, new)
    assert obs is not None and obs[0] == TinyChat.EOS and prompt + reply + obs == full


def test_tl_grpo_turn_advantages_match_the_worked_example() -> None:
    got = turn_advantages([[1, 0, 0, 0], [0.5]], outcome=1 - 0.5)
    assert got == pytest.approx([1.982051, 0.25], abs=1e-6)
    assert turn_advantages([[0, 1, 1, 0]], outcome=0 - 0.5) == pytest.approx([-1.25])


def config(*flags: str):  # type: ignore[no-untyped-def]
    return load_config(None, ["--model", "tiny", "--environment-provider", "openenv", "--environment-id",
                              "http://127.0.0.1:9", *flags], import_plugins=False).config


def test_openenv_args_are_checked_by_name() -> None:
    s = parse(config("--environment-args", '{"num_examples": 3, "retries": 1, "message_timeout_s": 2}'))
    assert (s.num_examples, s.retries, s.message_timeout_s, s.connect_timeout_s) == (3, 1, 2.0, 10.0)
    with pytest.raises(UserError, match=r"args\.bogus: not an OpenEnv argument"):
        parse(config("--environment-args", '{"bogus": 1}'))
    with pytest.raises(UserError, match=r"args\.retries = 'x': expected int"):
        parse(config("--environment-args", '{"retries": "x"}'))
    with pytest.raises(UserError, match="not built yet"):
        parse(config("--environment-args", '{"expected_task_ids": [1]}'))


def test_env_clock_counts_overlapping_calls_once() -> None:
    clock = EnvClock()

    async def call(_: int) -> None:
        await clock.timed(asyncio.sleep(0.05))

    t0 = time.perf_counter()
    asyncio.run(bounded(list(range(8)), call, 8))
    wall = time.perf_counter() - t0
    assert clock.wall_s <= wall and clock.wall_s < 0.2
    assert clock.busy_s >= 8 * 0.05
