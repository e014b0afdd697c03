"""`math`: the MATH competition problems (Hendrycks et al.), from a local copy or the hub.

Subjects follow the reference: intermediate_algebra, precalculus, number_theory,
counting_and_probability, geometry (train split). The reference answer is the last
`\\boxed{}` of the solution. Offline without a local copy this is a clear error, never a hang.
Training walks the problems in an order shuffled by the run's seed (the reference walked them
in file order: a file sorted by difficulty or topic fed whole batches of one kind); the
held-out problems keep file order. A twentieth of the problems is held out for evaluation
(`retrain.data.split`, keyed on the problem statement); training never sees them.

A local copy's rows that give no problem (a solution without a `\\boxed{}` answer, an empty
reference, other keys, a line that is not a JSON object) are dropped and counted by reason in
the result's `notes`, which the run prints; a line that is not JSON or not UTF-8 is a
`DataError` naming `file:line`.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.data.source import DataError, ExampleList, data_seed
from retrain.data.split import held_out
from retrain.data.table.where import quiet
from retrain.io.json import numbered_rows
from retrain.rewards.boxed import extract_boxed
from retrain.types import Example

SUBJECTS = ("intermediate_algebra", "precalculus", "number_theory", "counting_and_probability", "geometry")
HUB_ID = "EleutherAI/hendrycks_math"


def _row_to_example(row: dict[str, Any]) -> Example | str:
    """The row's problem, or why it has none."""
    if "problem" in row and "solution" in row:
        answer = extract_boxed(str(row["solution"]))
        return Example(prompt=str(row["problem"]), reference=answer, task="math") if answer else \
            "a solution without a \\boxed{} answer"
    if "prompt" in row:
        reference = str(row.get("reference", row.get("answer", "")) or "")
        if not reference.strip():
            return "an empty reference"
        return Example(prompt=str(row["prompt"]), reference=reference, completion=str(row.get("completion", "")),
                       task="math")
    return "neither problem/solution nor prompt keys"


def _rows(f: Path) -> Iterator[tuple[str, Any]]:
    """(where, value) of each row of a JSONL file (by line) or a JSON file (a list, or one object)."""
    if f.suffix == ".jsonl":
        for n, row in numbered_rows(f, DataError):
            yield f"{f}:{n}", row
        return
    try:
        rows = json.loads(f.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise DataError(f"{f}: not UTF-8 (byte 0x{exc.object[exc.start]:02x} at byte {exc.start + 1})") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{f}:{exc.lineno}: not JSON ({exc.msg} at column {exc.colno})") from None
    for i, row in enumerate(rows if isinstance(rows, list) else [rows]):
        yield f"{f} item {i}", row


def load_local(path: Path) -> ExampleList:
    """The problems of a file or folder; rows that give none are counted by reason in `notes`."""
    files = sorted(path.rglob("*.jsonl")) + sorted(path.rglob("*.json")) if path.is_dir() else [path]
    out: list[Example] = []
    dropped: dict[str, tuple[int, str]] = {}
    rows = 0
    for f in files:
        for where, row in _rows(f):
            rows += 1
            got = _row_to_example(row) if isinstance(row, dict) else "a value that is not a JSON object"
            if isinstance(got, Example):
                out.append(got)
            else:
                count, first = dropped.get(got, (0, where))
                dropped[got] = (count + 1, first)
    notes = [f"[data] path {str(path)!r}: dropped {count} of {rows} rows with {reason} (the first: {first})"
             for reason, (count, first) in dropped.items()]
    return ExampleList(out, notes)


def load_math(config: TrainConfig) -> ExampleList:
    seed = config.training.seed
    found = _all_problems(config)
    problems = [ex for ex in found if not held_out("math", ex.prompt, seed)]
    random.Random(f"math:{data_seed(config)}").shuffle(problems)
    return ExampleList(problems, found.notes)


def load_math_held_out(config: TrainConfig) -> list[Example]:
    seed = config.training.seed
    return [ex for ex in _all_problems(config) if held_out("math", ex.prompt, seed)]


def _all_problems(config: TrainConfig) -> ExampleList:
    if config.data.path:
        path = Path(config.data.path)
        if not path.exists():
            raise DataError(f"[data] path {config.data.path!r} does not exist")
        examples = load_local(path)
        if not examples:
            why = "; ".join(examples.notes)
            raise DataError(f"[data] path {config.data.path!r} holds no problem/solution or prompt/reference rows"
                            + (f" ({why})" if why else ""))
        return examples
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        raise DataError("the math data source needs the hub, and HF_HUB_OFFLINE=1 is set: "
                        "set [data] path to a local copy (JSONL rows with problem/solution)")
    try:
        import datasets  # type: ignore[import-untyped]
    except ImportError:
        raise DataError("the math data source needs the `datasets` package to read the hub "
                        "(pip install datasets), or set [data] path to a local copy") from None
    out = ExampleList()
    for subject in SUBJECTS:
        try:
            with quiet():
                split = datasets.load_dataset(HUB_ID, subject, split="train")
        except Exception as exc:
            raise DataError(f"cannot load {HUB_ID}/{subject} from the hub ({type(exc).__name__}: {exc}); "
                            "set [data] path to a local copy") from None
        for row in split:
            ex = _row_to_example(dict(row))
            if isinstance(ex, Example):
                out.append(ex)
    return out
