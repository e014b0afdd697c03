"""The regex planning detector: marks the tokens of each strategic gram occurrence.

The cleaned tokens are joined with single spaces and every gram is searched as a whole-word,
case-insensitive phrase (occurrences may overlap). The tokens whose text overlaps an
occurrence are marked, provided the occurrence spans at most W = max(5, longest gram in
words) tokens. Only the phrase's own tokens are marked: the reference's window scan also
marked up to W - len(gram) tokens *before* a gram ("a b c d e f let me think" marked "e f"),
which fed routine tokens to HICRA/SEPA as planning tokens.

Consequences kept from the reference: sub-word pieces are joined with a space ("ver", "ify"
does not match "verify"), punctuation tokens break a phrase ("Wait , let me" is not "wait let
me"), and a curly apostrophe does not match "that's".
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from retrain.config.schema import TrainConfig
from retrain.planning.tokens import clean, parse_grams
from retrain.planning.types import Mask


class RegexDetector:
    def __init__(self, grams: Sequence[str] | None = None) -> None:
        self.grams = tuple(grams) if grams is not None else parse_grams(None)
        self.window = max([5, *(len(g.split()) for g in self.grams)])
        # Longest first, so at each position the longest gram wins; the lookahead makes
        # occurrences that overlap each other all visible to finditer.
        ordered = sorted(self.grams, key=len, reverse=True)
        alternation = "|".join(rf"\b{re.escape(g)}\b" for g in ordered)
        self.pattern = re.compile(rf"(?=({alternation}))", re.IGNORECASE) if ordered else None

    @classmethod
    def from_config(cls, config: TrainConfig) -> RegexDetector:
        return cls(parse_grams(config.logging.strategic_grams))

    def mask(self, tokens: Sequence[str]) -> Mask:
        out = np.zeros(len(tokens), dtype=np.int8)
        if self.pattern is None or not tokens:
            return out
        starts: list[int] = []
        ends: list[int] = []
        pieces: list[str] = []
        owner: list[int] = []
        cursor = 0
        for i, token in enumerate(tokens):
            piece = clean(token)
            if not piece:
                continue
            if pieces:
                cursor += 1
            starts.append(cursor)
            cursor += len(piece)
            ends.append(cursor)
            pieces.append(piece)
            owner.append(i)
        if not pieces:
            return out
        text = " ".join(pieces)
        start_arr, end_arr = np.asarray(starts), np.asarray(ends)
        for m in self.pattern.finditer(text):
            lo, hi = m.start(1), m.end(1)
            first = int(np.searchsorted(end_arr, lo, side="right"))
            last = int(np.searchsorted(start_arr, hi, side="left")) - 1
            if first > last:
                continue
            a, b = owner[first], owner[last]
            if b - a + 1 <= self.window:
                out[a : b + 1] = 1
        return out
