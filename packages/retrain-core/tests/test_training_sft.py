"""SFT data, batch orders and the config rules of `trainer = "sft"`, the SFT keys and
`kl_coef`, without a model: a character tokenizer stands in for the backend's."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from retrain.config import ConfigError
from retrain.training.sft.data import (
    Encoded,
    check_pins,
    encode_row,
    read_sft_data,
)
from retrain.training.sft.order import BatchSchedule
from retrain.training.sft.records import SftDataError, sft_cap
from retrain.validation.load import load_config

EOS = 1


class CharTokenizer:
    def __init__(self) -> None:
        self.eos_token_ids = [EOS]

    def encode_prompt(self, text: str) -> list[int]:
        return [2] + [ord(ch) for ch in text] + [3]  # a "template" around the prompt

    def encode(self, text: str) -> list[int]:
        return [ord(ch) for ch in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i) for i in ids if i > 3)

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [chr(i) for i in ids]

    def encode_messages(self, messages: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[bool]]:
        ids: list[int] = []
        mask: list[bool] = []
        for m in messages:
            part = [4, *self.encode(m["content"])]
            ids += part
            mask += [m["role"] == "assistant"] * len(part)
        return ids, mask


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def config(tmp_path: Path, text: str) -> Any:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return load_config(p).config


def errors(tmp_path: Path, text: str) -> list[str]:
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(p)
    return [i.render() for i in info.value.issues]


# -- data ------------------------------------------------------------------------------------
def test_three_row_shapes_and_their_supervised_tokens(tmp_path: Path) -> None:
    data = read_sft_data(str(write_jsonl(tmp_path / "d.jsonl", [
        {"prompt": "1+1=", "completion": "2"},
        {"text": "abc"},
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
    ])))
    assert [r.kind for r in data.rows] == ["prompt_completion", "text", "messages"]
    tok = CharTokenizer()
    pc, text, msgs = (encode_row(r, tok, data.path) for r in data.rows)
    assert pc.tokens == [2, *map(ord, "1+1="), 3, ord("2"), EOS]
    assert pc.target == [False] * 6 + [True, True]  # the completion and EOS only
    assert text.tokens == [97, 98, 99] and text.target == [False, True, True]
    assert msgs.target == [False] * 3 + [True] * 3  # the assistant turn only


@pytest.mark.parametrize("row,message", [
    ({"prompt": "x"}, "'prompt' and 'completion' must both be strings"),
    ({"messages": [{"role": "user", "content": "x"}]}, "no assistant turn"),
    ({"other": 1}, "expected 'messages', 'prompt' and 'completion', or 'text'"),
    ([1, 2], "expected a JSON object"),
])
def test_a_bad_row_is_named_by_file_and_line(tmp_path: Path, row: object, message: str) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "ok"}, row])
    with pytest.raises(SftDataError, match=rf"d\.jsonl:2: .*{message[:20]}"):
        read_sft_data(str(path))


def test_messages_need_a_chat_template(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"messages": [{"role": "assistant", "content": "x"}]}])
    data = read_sft_data(str(path))

    class Plain(CharTokenizer):
        encode_messages = None  # type: ignore[assignment]

    with pytest.raises(SftDataError, match=r"d\.jsonl:1: 'messages' rows need a tokenizer with a chat template"):
        encode_row(data.rows[0], Plain(), data.path)


def test_pins_name_the_key_and_both_values(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "a"}, {"text": "b"}])
    data = read_sft_data(str(path))
    base = f"[training]\ntrainer = 'sft'\nsft_data_path = '{path}'\n"
    check_pins(config(tmp_path, base + f"sft_data_rows = 2\nsft_data_sha256 = '{data.sha256}'\n"), data)
    with pytest.raises(SftDataError, match=r"\[training\] sft_data_rows: expected 999, .* has 2 rows"):
        check_pins(config(tmp_path, base + "sft_data_rows = 999\n"), data)
    with pytest.raises(SftDataError, match=rf"sft_data_sha256: expected {'a' * 64}, .* has {data.sha256}"):
        check_pins(config(tmp_path, base + f"sft_data_sha256 = '{'a' * 64}'\n"), data)


def test_truncation_keeps_the_head_and_counts_the_rest(tmp_path: Path) -> None:
    row = Encoded(tokens=list(range(10)), target=[False] * 4 + [True] * 6)
    datum, dropped = row.datum(7)
    assert datum.tokens == list(range(7)) and dropped == 3
    assert datum.advantages == [0.0] * 4 + [1.0] * 3
    assert row.datum(0)[1] == 0 and row.datum(10)[1] == 0
    sft = "[training]\ntrainer = 'sft'\nsft_data_path = 'x'\nmax_tokens = 100\n"
    assert sft_cap(config(tmp_path, sft)) == 100
    assert sft_cap(config(tmp_path, sft + "sft_max_tokens = 30\n")) == 30
    assert sft_cap(config(tmp_path, "[training]\nmax_tokens = 100\nsft_warmup_steps = 1\n")) == 612


# -- batch orders ----------------------------------------------------------------------------
LENGTHS = (5, 3, 9, 1, 7, 2, 8, 4)


def stream(s: BatchSchedule, steps: int) -> list[int]:
    return [i for step in range(steps) for i in s.batch(step)]


def test_shuffle_visits_every_row_once_per_epoch() -> None:
    s = BatchSchedule(LENGTHS, 2, "shuffle", seed=3)
    first, second = stream(s, 4), stream(s, 8)[8:]
    assert sorted(first) == list(range(8)) and first == second  # the same order every epoch
    assert first != sorted(first)
    again = BatchSchedule(LENGTHS, 2, "shuffle", seed=3, reshuffle=True)
    epochs = stream(again, 8)
    assert sorted(epochs[8:]) == list(range(8)) and epochs[:8] != epochs[8:]  # (seed, epoch) orders
    assert stream(BatchSchedule(LENGTHS, 2, "shuffle", seed=4), 4) != first


def test_length_orders() -> None:
    asc = stream(BatchSchedule(LENGTHS, 4, "length"), 2)
    assert [LENGTHS[i] for i in asc] == sorted(LENGTHS)
    assert stream(BatchSchedule(LENGTHS, 4, "length_asc"), 2) == asc
    assert [LENGTHS[i] for i in stream(BatchSchedule(LENGTHS, 4, "length_desc"), 2)] == sorted(LENGTHS, reverse=True)


def test_length_buckets_sort_within_each_window() -> None:
    s = BatchSchedule(LENGTHS, 2, "length_bucket", seed=1, bucket=4)
    order = stream(s, 4)
    assert sorted(order) == list(range(8))
    for k in (0, 4):
        window = [LENGTHS[i] for i in order[k:k + 4]]
        assert window == sorted(window)
    full = stream(BatchSchedule(LENGTHS, 2, "length_bucket", seed=1), 4)
    assert [LENGTHS[i] for i in full] == sorted(LENGTHS)


def test_a_batch_may_span_two_epochs_and_epochs_are_fractional() -> None:
    s = BatchSchedule(LENGTHS[:3], 2, "length")
    assert [s.batch(i) for i in range(3)] == [[1, 0], [2, 1], [0, 2]]
    assert s.epoch_of(2) == 2.0


# -- config rules ----------------------------------------------------------------------------
def test_sft_config_rules_name_their_keys(tmp_path: Path) -> None:
    joined = "\n".join(errors(tmp_path, "[training]\ntrainer = 'sft'\nsft_data_path = 'd.jsonl'\n"
                                        "sft_warmup_steps = 3\nsft_length_bucket_size = 8\n"))
    assert "[training] sft_warmup_steps: is the RL trainer's warmup" in joined
    assert "[training] sft_length_bucket_size: applies to sft_batch_order = 'length_bucket'" in joined
    joined = "\n".join(errors(tmp_path, "[training]\nsft_data_path = 'd.jsonl'\n"))
    assert "[training] sft_data_path: is read by trainer = sft or by the RL trainer's warmup" in joined
    ok = config(tmp_path, "[training]\nsft_warmup_steps = 2\nsft_data_path = 'd.jsonl'\nsft_batch_order = 'length'\n")
    assert ok.training.sft_batch_order == "length"


def test_kl_coef_is_refused_on_a_backend_without_reference_logprobs(tmp_path: Path) -> None:
    joined = "\n".join(errors(tmp_path, "[backend]\nbackend = 'tinker'\n[training]\nkl_coef = 0.1\n"))
    assert "[training] kl_coef: the KL penalty to the reference policy is not available on backend 'tinker'" in joined
    c = config(tmp_path, "[training]\nkl_coef = 0.1\nkl_estimator = 'k2'\n")
    assert c.training.kl_coef == 0.1 and c.training.kl_estimator == "k2"
    assert any("kl_estimator" in e for e in errors(tmp_path, "[training]\nkl_estimator = 'k4'\n"))
