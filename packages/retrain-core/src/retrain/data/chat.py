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
"""

from __future__ import annotations

import re

from retrain.backends.protocol import ChatTokenizer, Tokenizer
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


def encode_example(example: Example, tokenizer: Tokenizer) -> list[int]:
    """The prompt tokens of an example as the model sees them (the module docstring)."""
    asked = question(example)
    if asked is not None and reads_instructions(tokenizer):
        assert isinstance(tokenizer, ChatTokenizer)
        return tokenizer.encode_chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": asked}])
    return tokenizer.encode_prompt(example.prompt)
