"""Built-in data sources: arithmetic (generated) and math (local copy; a clear error offline)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from retrain.config import load_config
from retrain.data.arithmetic import arithmetic_examples
from retrain.data.source import DataError, Example, load_examples


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
    assert [(e.prompt, e.reference) for e in examples] == [("What is 1+1?", "2"), ("2*3?", "6")]


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
