"""Prompt batches: round-robin over the data source with a cursor saved in checkpoints."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from retrain.backends.protocol import Tokenizer
from retrain.data.chat import encode_example
from retrain.types import Example


class PromptCursor:
    def __init__(self, examples: Sequence[Example], tokenizer: Tokenizer, start: int = 0,
                 encode: Callable[[Example, Tokenizer], list[int]] | None = None) -> None:
        """`encode`: the environment's own prompt rendering (messages, a system prompt); by
        default retrain.data.chat's."""
        self.examples = list(examples)
        self.tokenizer = tokenizer
        self._encode = encode
        self.index = start
        self._encoded: dict[int, list[int]] = {}
        self.encode_calls = 0

    def take(self, n: int) -> list[tuple[Example, list[int]]]:
        out = []
        for _ in range(n):
            i = self.index % len(self.examples)
            self.index += 1
            out.append((self.examples[i], self.encoded(i)))
        return out

    def encoded(self, i: int) -> list[int]:
        ids = self._encoded.get(i)
        if ids is None:
            self.encode_calls += 1
            ex = self.examples[i]
            ids = self._encoded[i] = (self._encode or encode_example)(ex, self.tokenizer)
        return ids
