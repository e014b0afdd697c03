"""Where evaluation problems come from: `[eval] data_path` (any table `[data] path` takes, a
JSONL file of `prompt` and `reference` or `answer` rows as the simplest, mapped by `[data]`'s
keys; an `id` column names the problems), else the held-out side of the `[data] source` (the
built-in `arithmetic`, `math` and `dataset` have one; other sources need a data_path).
`[eval] max_examples` keeps the first N. Rows that give no problem (an empty prompt or
reference) are dropped, counted, and said in the result's `notes`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from retrain.backends.protocol import Tokenizer
from retrain.config.schema import TrainConfig
from retrain.data.source import DataError, ExampleList, ExampleSequence, notes_of
from retrain.types import Example

if TYPE_CHECKING:
    from retrain.evaluation.evaluate import Problem

#: data sources with a held-out split, and where it is loaded from
HELD_OUT_SOURCES = ("arithmetic", "math", "dataset")


def _held_out_loader(name: str) -> Callable[[TrainConfig], Sequence[Example]]:
    if name == "arithmetic":
        from retrain.data.arithmetic import load_arithmetic_held_out

        return load_arithmetic_held_out
    if name == "dataset":
        from retrain.data.table.source import load_dataset_held_out

        return load_dataset_held_out
    from retrain.data.math import load_math_held_out

    return load_math_held_out


def load_problems(config: TrainConfig, *, max_examples: int | None = None) -> Sequence[Example]:
    e = config.eval
    if e.data_path:
        from retrain.data.table.source import eval_table

        problems: Sequence[Example] = eval_table(config)
        where = f"[eval] data_path {e.data_path!r}"
    elif config.data.source in HELD_OUT_SOURCES and not config.environment.provider:
        problems = _held_out_loader(config.data.source)(config)
        where = f"the held-out split of [data] source {config.data.source!r}"
    else:
        raise DataError(f"[data] source {config.data.source!r} has no held-out split: set [eval] data_path "
                        "to a file of prompt/reference rows")
    limit = e.max_examples if max_examples is None else max_examples
    if 0 < limit < len(problems):
        kept = problems[:limit]
        problems = kept if isinstance(kept, ExampleSequence) else ExampleList(kept, notes_of(problems))
    if not problems:
        raise DataError(f"{where} holds no problems")
    return problems


def encode_held_out(config: TrainConfig, examples: Sequence[Example], tokenizer: Tokenizer,
                    note: Callable[[str], None]) -> list[Problem]:
    """The problems as the run's model reads them (`[data] chat_template_kwargs`), those longer
    than `[data] max_prompt_tokens` left out and counted through `note`."""
    from retrain.data.chat import PromptEncoder
    from retrain.evaluation.evaluate import encode_problems

    limit = config.data.max_prompt_tokens
    problems = encode_problems(examples, tokenizer, PromptEncoder.of(config), max_prompt_tokens=limit)
    if dropped := len(examples) - len(problems):
        note(f"[data] max_prompt_tokens = {limit}: {dropped} of {len(examples)} evaluation problems are longer "
             "and left out")
    if not problems:
        raise DataError(f"[data] max_prompt_tokens = {limit}: every evaluation problem is longer",
                        hint="raise max_prompt_tokens, or 0 to keep every prompt")
    return problems
