"""Token-in/token-out conversations: the ids a turn's observation adds after the tokens the
policy sampled, taken from the chat template without re-tokenising what was sampled.

A multi-turn prompt is always the previous prompt + the sampled ids + the observation ids
(retrain.rollout.episode). The observation ids come from three renders of the
conversation as text: before the reply (with the generation prompt), through the reply, and
through the new messages (with the generation prompt). The template's tokens that close the
assistant's turn (an end-of-turn marker the policy did not sample, e.g. after a truncated
reply) lead the observation; a closing token the policy did sample is not repeated. When the
renders are not prefixes of one another (a template that rewrites earlier turns), there is no
exact extension and the caller starts a new segment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from retrain.backends.protocol import ChatTokenizer, Tokenizer
from retrain.errors import UserError

Message = Mapping[str, Any]


def chat_tokenizer(tokenizer: Tokenizer) -> ChatTokenizer:
    if not isinstance(tokenizer, ChatTokenizer):
        raise UserError(f"the backend's tokenizer ({type(tokenizer).__name__}) renders no conversations "
                        "(encode_chat), which environments need", hint='backend = "local"')
    return tokenizer


def prompt_ids(tokenizer: ChatTokenizer, messages: Sequence[Message]) -> list[int]:
    return tokenizer.encode_chat(list(messages), add_generation_prompt=True)


def _common_suffix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    n = 0
    while n < limit and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return n


def observation_ids(tokenizer: ChatTokenizer, history: Sequence[Message], reply: str, sampled: Sequence[int],
                    new: Sequence[Message], *, generation_prompt: bool = True) -> list[int] | None:
    """The ids that follow `sampled` (the policy's reply to `history`) when `new` messages
    are appended; None when the template does not extend the conversation exactly."""
    asst = {"role": "assistant", "content": reply}
    before = tokenizer.encode_chat(list(history), add_generation_prompt=True)
    through = tokenizer.encode_chat([*history, asst], add_generation_prompt=False)
    after = tokenizer.encode_chat([*history, asst, *new], add_generation_prompt=generation_prompt)
    empty = tokenizer.encode_chat([*history, {"role": "assistant", "content": ""}], add_generation_prompt=False)
    if through[:len(before)] != before or after[:len(through)] != through or empty[:len(before)] != before:
        return None
    turn, wrapper = through[len(before):], empty[len(before):]
    closing = list(turn[len(turn) - _common_suffix(turn, wrapper, min(len(turn), len(wrapper))):])
    if closing and sampled and sampled[-1] == closing[0]:
        closing = closing[1:]
    return closing + after[len(through):]
