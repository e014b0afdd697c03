"""The tiny model's tokenizer renders SFT `messages` rows with its chat template and marks the
assistant turns' tokens (the SFT loss mask)."""

from __future__ import annotations

import pytest

from retrain.backends.tokenizer import HFTokenizer
from retrain.models.load import ModelSpec, load_tokenizer


@pytest.fixture(scope="module")
def tok() -> HFTokenizer:
    return HFTokenizer(load_tokenizer(ModelSpec("tiny")))


def test_assistant_turns_are_the_supervised_tokens(tok: HFTokenizer) -> None:
    messages = [{"role": "user", "content": "2+2="}, {"role": "assistant", "content": "4"},
                {"role": "user", "content": "3+3="}, {"role": "assistant", "content": "6"}]
    ids, mask = tok.encode_messages(messages)
    assert len(ids) == len(mask)
    supervised = [i for i, m in zip(ids, mask, strict=True) if m]
    # each assistant turn's content and the EOS the template closes it with; no role markers
    assert tok.decode(supervised) == "46"
    assert supervised.count(tok.eos_token_ids[0]) == 2
    assert tok.decode(ids).endswith("6")
    assert ids[: len(tok.encode_prompt("2+2="))] == tok.encode_prompt("2+2=")
