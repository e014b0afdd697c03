"""Built-in data sources: arithmetic (generated) and math (local copy; a clear error offline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import msgspec
import pytest

from retrain.data.arithmetic import arithmetic_examples
from retrain.data.source import DataError, Example, load_examples
from retrain.validation.load import load_config


def test_arithmetic_is_complete_seeded_and_verifiable() -> None:
    a = arithmetic_examples(1, seed=3)
    held = arithmetic_examples(1, seed=3, held=True)
    assert len(a) + len(held) == 100 and len({e.prompt for e in a + held}) == 100
    assert 0 < len(held) < 40
    assert a == arithmetic_examples(1, seed=3) and a != arithmetic_examples(1, seed=4)
    for e in a + held:
        x, y = e.prompt[:-1].split("+")
        assert e.reference == str(int(x) + int(y)) and e.completion == f"\\boxed{{{e.reference}}}"
    hard = arithmetic_examples(3, seed=0)
    assert len(hard) == 20_000 and max(int(e.reference) for e in hard) > 100


def test_difficulty_and_max_examples_from_config() -> None:
    c = load_config(None, ["--data-source", "arithmetic", "--data-difficulty", "2", "--max-examples", "50"]).config
    examples = load_examples(c)
    assert len(examples) == 50 and any(len(e.prompt) > 4 for e in examples)


def test_math_offline_without_local_copy_is_a_clear_error() -> None:
    c = load_config(None, ["--data-source", "math"]).config
    with pytest.raises(DataError, match=r"HF_HUB_OFFLINE=1.*\[data\] path"):
        load_examples(c)


def test_math_from_a_local_copy(tmp_path: Path) -> None:
    rows = [{"problem": "What is 1+1?", "solution": "It is \\boxed{2}."},
            {"problem": "No answer", "solution": "none"},
            {"prompt": "2*3?", "reference": "6"}]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    c = load_config(None, ["--data-source", "math", "--data-path", str(tmp_path)]).config
    examples = load_examples(c)
    assert sorted((e.prompt, e.reference) for e in examples) == [("2*3?", "6"), ("What is 1+1?", "2")]


def test_a_file_backed_source_walks_an_order_of_its_seed_and_resume_continues_it(tmp_path: Path) -> None:
    from retrain.training.prompts import PromptCursor
    from retrain.types import Example

    rows = [{"prompt": f"{a}+1?", "reference": str(a + 1)} for a in range(200)]  # file order: easy to hard
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))

    def order(seed: int) -> list[str]:
        c = load_config(None, ["--data-source", "math", "--data-path", str(tmp_path), "--seed", str(seed)]).config
        return [e.prompt for e in load_examples(c)]

    one, two = order(1), order(2)
    in_file_order = [r["prompt"] for r in rows if r["prompt"] in set(one)]
    assert one == order(1) and one != two and one != in_file_order and sorted(one) == sorted(in_file_order)

    class Ids:  # the cursor's tokenizer: only the prompts' identity matters here
        eos_token_ids: ClassVar[list[int]] = [0]

        def encode_prompt(self, text: str) -> list[int]:
            return [one.index(text)]

    examples = [Example(prompt=p, task="default") for p in one]
    straight = [ex.prompt for ex, _ in PromptCursor(examples, Ids()).take(20)]  # type: ignore[arg-type]
    first = PromptCursor(examples, Ids())  # type: ignore[arg-type]
    taken = [ex.prompt for ex, _ in first.take(8)]
    resumed = PromptCursor([Example(prompt=p, task="default") for p in order(1)], Ids(), start=first.index)  # type: ignore[arg-type]
    assert taken + [ex.prompt for ex, _ in resumed.take(12)] == straight


REFERENCE_STYLE_PLUGIN = '''
from dataclasses import dataclass, field


@dataclass
class Example:  # the reference's own record: prompt, reference, task, info, example_id
    prompt: str
    reference: str
    task: str = "default"
    info: dict = field(default_factory=dict)
    example_id: int = 0


class Source:
    def __init__(self, config):
        self.n = config.training.max_examples or 3

    def load(self):
        return [Example(prompt=f"{i}+{i}=", reference=str(2 * i), info={"seed": i}, example_id=i)
                for i in range(5)]


def factory(config):
    return Source(config)
'''


def test_reference_style_plugin_with_load_and_example_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ref_data.py").write_text(REFERENCE_STYLE_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    c = load_config(None, ["--data-source", "ref_data.factory", "--max-examples", "3"]).config
    examples = load_examples(c)
    assert [(e.prompt, e.reference, e.example_id, e.info) for e in examples] == [
        ("0+0=", "0", 0, {"seed": 0}), ("1+1=", "2", 1, {"seed": 1}), ("2+2=", "4", 2, {"seed": 2})]


def test_registered_data_source_is_used() -> None:
    from retrain.registry.core import register, unregister

    register("data_source", "mine", lambda config: [Example(prompt="q", reference="a")])
    try:
        c = load_config(None, ["--data-source", "mine"]).config
        assert load_examples(c) == [Example(prompt="q", reference="a")]
    finally:
        unregister("data_source", "mine")


def test_unknown_data_source_names_what_is_available() -> None:
    from retrain.errors import UserError

    c = load_config(None, ["--data-source", "arithmetic"]).config
    c = msgspec.structs.replace(c, data=msgspec.structs.replace(c.data, source="nope"))
    with pytest.raises(UserError, match=r"unknown data source 'nope'.*arithmetic"):
        load_examples(c)
