"""`math`: the MATH competition problems (Hendrycks et al.), from a local copy or the hub.

Subjects follow the reference: intermediate_algebra, precalculus, number_theory,
counting_and_probability, geometry (train split). The reference answer is the last
`\\boxed{}` of the solution. Offline without a local copy this is a clear error, never a hang.
Training walks the problems in an order shuffled by the run's seed (the reference walked them
in file order: a file sorted by difficulty or topic fed whole batches of one kind); the
held-out problems keep file order. A twentieth of the problems is held out for evaluation
(`retrain.data.split`, keyed on the problem statement); training never sees them.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.data.source import DataError, data_seed
from retrain.data.split import held_out
from retrain.rewards.boxed import extract_boxed
from retrain.types import Example

SUBJECTS = ("intermediate_algebra", "precalculus", "number_theory", "counting_and_probability", "geometry")
HUB_ID = "EleutherAI/hendrycks_math"


def _row_to_example(row: dict[str, Any]) -> Example | None:
    if "problem" in row and "solution" in row:
        answer = extract_boxed(str(row["solution"]))
        return Example(prompt=str(row["problem"]), reference=answer, task="math") if answer else None
    if "prompt" in row:
        return Example(prompt=str(row["prompt"]), reference=str(row.get("reference", row.get("answer", ""))),
                       completion=str(row.get("completion", "")), task="math")
    return None


def load_local(path: Path) -> list[Example]:
    files = sorted(path.rglob("*.jsonl")) + sorted(path.rglob("*.json")) if path.is_dir() else [path]
    out: list[Example] = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        rows = [json.loads(line) for line in text.splitlines() if line.strip()] if f.suffix == ".jsonl" \
            else json.loads(text)
        if isinstance(rows, dict):
            rows = [rows]
        for row in rows:
            ex = _row_to_example(row) if isinstance(row, dict) else None
            if ex is not None:
                out.append(ex)
    return out


def load_math(config: TrainConfig) -> list[Example]:
    seed = config.training.seed
    problems = [ex for ex in _all_problems(config) if not held_out("math", ex.prompt, seed)]
    random.Random(f"math:{data_seed(config)}").shuffle(problems)
    return problems


def load_math_held_out(config: TrainConfig) -> list[Example]:
    seed = config.training.seed
    return [ex for ex in _all_problems(config) if held_out("math", ex.prompt, seed)]


def _all_problems(config: TrainConfig) -> list[Example]:
    if config.data.path:
        path = Path(config.data.path)
        if not path.exists():
            raise DataError(f"[data] path {config.data.path!r} does not exist")
        examples = load_local(path)
        if not examples:
            raise DataError(f"[data] path {config.data.path!r} holds no problem/solution or prompt/reference rows")
        return examples
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        raise DataError("the math data source needs the hub, and HF_HUB_OFFLINE=1 is set: "
                        "set [data] path to a local copy (JSONL rows with problem/solution)")
    try:
        import datasets  # type: ignore[import-untyped]
    except ImportError:
        raise DataError("the math data source needs the `datasets` package to read the hub "
                        "(pip install datasets), or set [data] path to a local copy") from None
    out: list[Example] = []
    for subject in SUBJECTS:
        try:
            split = datasets.load_dataset(HUB_ID, subject, split="train")
        except Exception as exc:
            raise DataError(f"cannot load {HUB_ID}/{subject} from the hub ({type(exc).__name__}: {exc}); "
                            "set [data] path to a local copy") from None
        for row in split:
            ex = _row_to_example(dict(row))
            if ex is not None:
                out.append(ex)
    return out
