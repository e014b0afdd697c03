"""Prompt batches: round-robin over the data source with a cursor saved in checkpoints.

The examples stay the sequence the source returned (a table's rows stay in Arrow; nothing
lists them). `max_prompt_tokens` > 0: a prompt longer than that, as the model sees it, is
passed over where the cursor meets it, every time; the cursor still counts it, so what a
checkpoint's cursor points at is the same with or without the limit, and a resumed run skips
the same rows. The rows passed over are counted (`dropped_long`) and the first is said through
`note`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from retrain.backends.protocol import Tokenizer
from retrain.data.chat import encode_example
from retrain.data.source import DataError
from retrain.types import Example

#: sources up to this many examples keep every encoding (an epoch comes round soon); larger
#: ones encode each prompt when the cursor reaches it, so memory does not grow with the walk
CACHE_ALL = 65_536


class PromptCursor:
    def __init__(self, examples: Sequence[Example], tokenizer: Tokenizer, start: int = 0,
                 encode: Callable[[Example, Tokenizer], list[int]] | None = None, *, max_prompt_tokens: int = 0,
                 note: Callable[[str], None] | None = None) -> None:
        """`encode`: the environment's own prompt rendering (messages, a system prompt), or the
        run's (`retrain.data.chat.PromptEncoder`); by default retrain.data.chat's."""
        self.examples = examples
        self.tokenizer = tokenizer
        self._encode = encode
        self.index = start
        self._encoded: dict[int, list[int]] = {}
        self._cache = len(examples) <= CACHE_ALL
        self.encode_calls = 0
        self.max_prompt_tokens = max_prompt_tokens
        self._note = note
        #: the examples (by position) passed over for their length
        self.dropped_long: set[int] = set()

    def take(self, n: int) -> list[tuple[Example, list[int]]]:
        out: list[tuple[Example, list[int]]] = []
        passed = 0
        while len(out) < n:
            i = self.index % len(self.examples)
            self.index += 1
            ids = self.encoded(i)
            if self.max_prompt_tokens and len(ids) > self.max_prompt_tokens:
                self._passed_over(i, len(ids))
                passed += 1
                if passed >= len(self.examples) and not out:
                    raise DataError(f"[data] max_prompt_tokens = {self.max_prompt_tokens}: every prompt is longer",
                                    hint="raise max_prompt_tokens, or 0 to keep every prompt")
                continue
            out.append((self.examples[i], ids))
        return out

    def _passed_over(self, i: int, length: int) -> None:
        if i in self.dropped_long:
            return
        self.dropped_long.add(i)
        if len(self.dropped_long) == 1 and self._note is not None:
            self._note(f"[data] max_prompt_tokens = {self.max_prompt_tokens}: prompts longer than that are dropped "
                       f"where the walk meets them (the first: {length} tokens); the run's summary counts them")

    def encoded(self, i: int) -> list[int]:
        ids = self._encoded.get(i)
        if ids is None:
            self.encode_calls += 1
            ex = self.examples[i]
            ids = (self._encode or encode_example)(ex, self.tokenizer)
            if self._cache:
                self._encoded[i] = ids
        return ids
