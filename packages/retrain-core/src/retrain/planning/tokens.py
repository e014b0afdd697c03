"""Token strings as the detectors see them, and the planning phrases ("strategic grams").

Tokens are the raw pieces of `tokenizer.convert_ids_to_tokens` (or decoded strings): the
SentencePiece / byte-level BPE space markers are turned into spaces and the piece is
stripped, so a piece is one word or a fragment of one.
"""

from __future__ import annotations

import json

SPACE_MARKERS = ("\u2581", "\u0120")  # SentencePiece "▁", byte-level BPE "Ġ"

DEFAULT_GRAMS: tuple[str, ...] = (
    "wait let me",
    "let me think",
    "on second thought",
    "let me check",
    "let me verify",
    "is this right",
    "double check",
    "try another approach",
    "go back and",
    "start over",
    "that's not right",
    "that doesn't work",
    "another way to",
    "or we could",
    "what if we",
    "notice that",
    "the key is",
    "the key insight",
)


def clean(token: str) -> str:
    for marker in SPACE_MARKERS:
        token = token.replace(marker, " ")
    return token.strip()


def parse_grams(value: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """`[logging] strategic_grams`: a list, a JSON array string, or comma-separated text;
    entries are stripped and empties dropped. Empty means the default grams."""
    if value is None or value == "" or value == []:
        return DEFAULT_GRAMS
    if isinstance(value, str):
        text = value.strip()
        items = json.loads(text) if text.startswith("[") else text.split(",")
    else:
        items = list(value)
    grams = tuple(str(g).strip() for g in items if str(g).strip())
    return grams or DEFAULT_GRAMS
