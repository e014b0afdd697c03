r"""How the built-in sources' problems read to a chat model.

A model whose tokenizer has a chat template and reads instructions sees a built-in problem
(task `arithmetic` or `math`) as two turns: `SYSTEM`, which asks for the final answer in
`\boxed{}` with nothing after it (the form the `strict` reward scores), and the question as
the user turn (`arithmetic`: "What is 3 + 5?"; `math`: the problem as written). Every other
prompt is the tokenizer's `encode_prompt` of the prompt text (one user turn when there is a
template): other tasks, models without a template, and models that declare they read no
instructions (`HFTokenizer(reads_instructions=False)`: the built-in `tiny`, whose template only
frames the turns of multi-turn environments, sees `<|user|>3+5=<|assistant|>`, a handful of
tokens where the instruction would cost ~130).

An example that carries `messages` (the `dataset` source's chat rows, or a row given a system
prompt) is those turns through the chat template; a tokenizer without one reads their contents
joined by blank lines. `[data] chat_template_kwargs` reach the template of every chat-rendered
prompt (`PromptEncoder`); a backend whose tokenizer cannot take them is a `DataError`.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from retrain.backends.protocol import ChatTokenizer, Tokenizer
from retrain.config.schema import TrainConfig
from retrain.data.source import DataError
from retrain.types import Example

SYSTEM = ("Solve the problem. Give the final answer as \\boxed{answer}, for example \\boxed{42}, "
          "and write nothing after it.")
#: an arithmetic prompt as retrain.data.arithmetic writes it
_SUM = re.compile(r"(\d+)\+(\d+)=")


def question(example: Example) -> str | None:
    """The user turn of a built-in problem, or None for any other task."""
    if example.task == "arithmetic":
        found = _SUM.fullmatch(example.prompt)
        return f"What is {found[1]} + {found[2]}?" if found else example.prompt
    if example.task == "math":
        return example.prompt
    return None


def reads_instructions(tokenizer: Tokenizer) -> bool:
    """Whether built-in problems reach this tokenizer's model as instruction and question turns."""
    return isinstance(tokenizer, ChatTokenizer) and bool(getattr(tokenizer, "instruction_turns", False))


def takes_template_kwargs(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer's `encode_chat` takes `template_kwargs` (retrain's HFTokenizer does)."""
    encode = getattr(tokenizer, "encode_chat", None)
    if encode is None:
        return False
    try:
        return "template_kwargs" in inspect.signature(encode).parameters
    except (TypeError, ValueError):
        return False


def encode_turns(tokenizer: Tokenizer, turns: Sequence[Mapping[str, Any]],
                 template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """Chat turns as the model reads them, with the assistant's generation prompt."""
    if not isinstance(tokenizer, ChatTokenizer):
        return tokenizer.encode_prompt("\n\n".join(str(t.get("content") or "") for t in turns))
    if not template_kwargs:
        return tokenizer.encode_chat(turns)
    if not takes_template_kwargs(tokenizer):
        raise DataError(f"[data] chat_template_kwargs: this backend's tokenizer ({type(tokenizer).__name__}) takes no "
                        "chat template arguments", hint="remove chat_template_kwargs")
    return tokenizer.encode_chat(turns, template_kwargs=template_kwargs)  # type: ignore[call-arg]


def encode_example(example: Example, tokenizer: Tokenizer,
                   template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """The prompt tokens of an example as the model sees them (the module docstring)."""
    if example.messages:
        return encode_turns(tokenizer, example.messages, template_kwargs)
    asked = question(example)
    if asked is not None and reads_instructions(tokenizer):
        return encode_turns(tokenizer, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": asked}],
                            template_kwargs)
    if template_kwargs and isinstance(tokenizer, ChatTokenizer):
        return encode_turns(tokenizer, [{"role": "user", "content": example.prompt}], template_kwargs)
    return tokenizer.encode_prompt(example.prompt)


@dataclass(frozen=True)
class PromptEncoder:
    """A run's prompt rendering: `encode_example` with `[data] chat_template_kwargs`."""

    template_kwargs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, config: TrainConfig) -> PromptEncoder:
        return cls(dict(config.data.chat_template_kwargs))

    def __call__(self, example: Example, tokenizer: Tokenizer) -> list[int]:
        return encode_example(example, tokenizer, self.template_kwargs)
