"""Small stand-ins retrain-core's tests share."""

from __future__ import annotations

from collections.abc import Sequence


class CharTokenizer:
    """One id per character, id 0 the end of a completion, no chat template."""

    eos_token_ids: tuple[int, ...] = (0,)

    def encode_prompt(self, text: str) -> list[int]:
        return [ord(ch) for ch in text]

    def encode(self, text: str) -> list[int]:
        return self.encode_prompt(text)

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i) for i in ids)

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [chr(i) for i in ids]
