"""The demo's prompts stay the handful of tokens its time and learning path were measured with:
the built-in `tiny` reads no instructions, so a built-in sum reaches it as the bare question in
its chat frame, not behind retrain.data.chat's system turn (~130 character tokens; that slipped
in once and made the README demo six times slower with no test noticing)."""

from __future__ import annotations

from pathlib import Path

from retrain.backends.local.backend import LocalBackend
from retrain.data.chat import SYSTEM
from retrain.data.source import load_examples
from retrain.training.prompts import PromptCursor
from retrain.validation.load import load_config

REPO = Path(__file__).resolve().parents[1]


def test_the_demo_poses_each_sum_as_a_few_tokens() -> None:
    config = load_config(REPO / "retrain.toml", import_plugins=False).config
    backend = LocalBackend(config)
    examples = load_examples(config)
    cursor = PromptCursor(examples, backend.tokenizer)
    tokenizer = backend.tokenizer
    for i, example in enumerate(examples[:20]):
        ids = cursor.encoded(i)
        text = tokenizer.hf.decode(ids)
        assert text.endswith(example.prompt + "<|assistant|>"), text
        assert SYSTEM not in text
        # bos, the user marker, "a+b=" (4-5 characters) and the assistant marker
        assert len(ids) <= 9, (len(ids), text)
