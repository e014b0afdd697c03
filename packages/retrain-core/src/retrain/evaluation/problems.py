"""Where evaluation problems come from: `[eval] data_path` (JSONL rows with `prompt` and
`reference`, or `answer`; optional `id`), else the held-out split of the `[data] source`
(the built-in `arithmetic` and `math` have one; other sources need a data_path).
`[eval] max_examples` keeps the first N."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from retrain.config.schema import TrainConfig
from retrain.data.source import DataError
from retrain.io.json import numbered_rows
from retrain.types import Example

#: data sources with a held-out split, and where it is loaded from
HELD_OUT_SOURCES = ("arithmetic", "math")


def _held_out_loader(name: str) -> Callable[[TrainConfig], list[Example]]:
    if name == "arithmetic":
        from retrain.data.arithmetic import load_arithmetic_held_out

        return load_arithmetic_held_out
    from retrain.data.math import load_math_held_out

    return load_math_held_out


def read_problems(path: str | Path) -> list[Example]:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"[eval] data_path {str(path)!r} is not a file")
    out: list[Example] = []
    for n, row in numbered_rows(p, DataError):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise DataError(f"{path}:{n}: a row needs a string 'prompt'")
        reference = row.get("reference", row.get("answer"))
        if reference is None:
            raise DataError(f"{path}:{n}: a row needs a 'reference' (or 'answer')")
        ident = row.get("id")
        out.append(Example(prompt=row["prompt"], reference=str(reference), task="eval",
                           example_id=ident if isinstance(ident, int | str) else None))
    return out


def load_problems(config: TrainConfig, *, max_examples: int | None = None) -> list[Example]:
    e = config.eval
    if e.data_path:
        problems, where = read_problems(e.data_path), f"[eval] data_path {e.data_path!r}"
    elif config.data.source in HELD_OUT_SOURCES and not config.environment.provider:
        problems = _held_out_loader(config.data.source)(config)
        where = f"the held-out split of [data] source {config.data.source!r}"
    else:
        raise DataError(f"[data] source {config.data.source!r} has no held-out split: set [eval] data_path "
                        "to a JSONL file of prompt/reference rows")
    limit = e.max_examples if max_examples is None else max_examples
    if limit > 0:
        problems = problems[:limit]
    if not problems:
        raise DataError(f"{where} holds no problems")
    return problems
