"""The held-out split: disjoint from every prompt training can draw, over the whole problem
space of `arithmetic` and over a whole `math` copy; a function of the seed and the data only."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from retrain.config.errors import ConfigError
from retrain.data.arithmetic import prompt
from retrain.data.source import DataError, load_examples, notes_of
from retrain.data.split import HELD_OUT_SHARE, held_out
from retrain.evaluation.problems import load_problems
from retrain.validation.load import load_config


def arithmetic(difficulty: int, seed: int, *extra: str):  # type: ignore[no-untyped-def]
    return load_config(None, ["--data-source", "arithmetic", "--data-difficulty", str(difficulty),
                              "--seed", str(seed), "--eval-every", "1", *extra]).config


@pytest.mark.parametrize(("difficulty", "seed"), [(1, 0), (1, 7), (1, -1), (2, 0), (2, 3)])
def test_arithmetic_small_spaces_split_exactly(difficulty: int, seed: int) -> None:
    """Every problem of the space is in exactly one side."""
    c = arithmetic(difficulty, seed)
    train = {e.prompt for e in load_examples(c)}
    held = {e.prompt for e in load_problems(c)}
    top = 10**difficulty
    space = {prompt(a, b) for a in range(top) for b in range(top)}
    assert train.isdisjoint(held) and train | held == space
    assert abs(len(held) / len(space) - HELD_OUT_SHARE["arithmetic"]) < 0.1


def test_arithmetic_sampled_space_is_disjoint_over_the_whole_space() -> None:
    """Difficulty 3 samples 20,000 training pairs out of 10^6: every pair of the space is
    held out or trainable by the predicate, and each side draws only its own."""
    c = arithmetic(3, 0)
    train = {e.prompt for e in load_examples(c)}
    held = {e.prompt for e in load_problems(c)}
    held_space = {prompt(a, b) for a in range(1000) for b in range(1000) if held_out("arithmetic", prompt(a, b), 0)}
    assert train and held and held <= held_space and train.isdisjoint(held_space)
    assert abs(len(held_space) / 10**6 - HELD_OUT_SHARE["arithmetic"]) < 0.01


def test_arithmetic_split_ignores_training_max_examples_and_eval_settings() -> None:
    full = {e.prompt for e in load_problems(arithmetic(1, 0))}
    assert {e.prompt for e in load_problems(arithmetic(1, 0, "--max-examples", "5"))} == full
    assert {e.prompt for e in load_problems(arithmetic(1, 0, "--eval-k", "8"))} == full
    assert [e.prompt for e in load_problems(arithmetic(1, 0, "--eval-max-examples", "3"))] == \
        [e.prompt for e in load_problems(arithmetic(1, 0))][:3]
    assert full != {e.prompt for e in load_problems(arithmetic(1, 1))}  # a function of the seed


def test_math_split_is_disjoint_over_a_whole_copy(tmp_path: Path) -> None:
    rows = [{"problem": f"Compute {i} times {i + 3}.", "solution": f"\\boxed{{{i * (i + 3)}}}"} for i in range(3000)]
    folder = tmp_path / "math"
    folder.mkdir()
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    c = load_config(None, ["--data-source", "math", "--data-path", str(folder), "--seed", "5",
                           "--eval-every", "1"]).config
    train = {e.prompt for e in load_examples(c)}
    held = {e.prompt for e in load_problems(c)}
    assert train.isdisjoint(held) and len(train | held) == 3000
    assert abs(len(held) / 3000 - HELD_OUT_SHARE["math"]) < 0.02
    # a property of each problem: another order, or fewer problems, moves none across
    random.Random(0).shuffle(rows)
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:1000]))
    assert {e.prompt for e in load_problems(c)} == held & {r["problem"] for r in rows[:1000]}


def test_eval_data_path(tmp_path: Path) -> None:
    path = tmp_path / "eval.jsonl"
    path.write_text('{"prompt": "1+1=", "reference": "2", "id": "a"}\n\n{"prompt": "2+2=", "answer": 4}\n')
    c = load_config(None, ["--data-source", "my.plugin", "--eval-every", "2", "--eval-data-path", str(path)],
                    import_plugins=False).config
    got = load_problems(c)
    assert [(e.prompt, e.reference, e.example_id) for e in got] == [("1+1=", "2", "a"), ("2+2=", "4", None)]
    path.write_text('{"prompt": "1+1=", "reference": "2"}\n{"prompt": "2+2="}\n')
    got = load_problems(c)
    assert [e.prompt for e in got] == ["1+1="]
    assert notes_of(got) == (f"{path}: dropped 1 of 2 rows with an empty reference (the first: {path}:2)",)
    path.write_text('{"prompt": "1+1="}\n')
    with pytest.raises(DataError, match=r"answer_key: .*eval.jsonl has no 'reference' or 'answer' column \(columns: prompt\)"):
        load_problems(c)


def test_a_source_without_a_split_needs_a_data_path() -> None:
    with pytest.raises(ConfigError, match=r"\[eval\] data_path: \[data\] source 'my.plugin' has no held-out split"):
        load_config(None, ["--data-source", "my.plugin", "--eval-before-train", "true"], import_plugins=False)
    # evaluation off: nothing to check
    load_config(None, ["--data-source", "my.plugin"], import_plugins=False)
