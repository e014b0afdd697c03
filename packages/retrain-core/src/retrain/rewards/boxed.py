r"""Exact-answer rewards on the last `\boxed{...}` of a response.

`match`: 1.0 iff the content of the last box equals the reference (both stripped); plain
string equality, no normalisation (`math` normalises). A response without a box, or with an
empty one, scores 0.0 even when the reference is empty (the reference scored 1.0 there,
rewarding non-answers whenever a data set lacked a reference).

`strict`: `match` plus form: exactly one box, and nothing but whitespace after it. It stops
the "EOS drift" seen with `match` on small models (`\boxed{5}}}}` until max tokens), because
text after the box is no longer free.
"""

from __future__ import annotations

BOX = "\\boxed{"


def box_span(text: str, start: int) -> tuple[str, int | None]:
    """(content, index just past the closing brace) of the box opening at `start`.

    Braces are counted from depth 1; an unbalanced box takes the rest of the text and has
    no end (None).
    """
    depth = 1
    i = start + len(BOX)
    while i < len(text):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start + len(BOX) : i], i + 1
        i += 1
    return text[start + len(BOX) :], None


def extract_boxed(text: str) -> str:
    r"""Stripped content of the last `\boxed{`, or "" (`\boxed {` and `\fbox` do not count)."""
    start = text.rfind(BOX)
    if start < 0:
        return ""
    return box_span(text, start)[0].strip()


class MatchReward:
    def extract_answer(self, response: str) -> str:
        """The answer a response gives (maj@k votes on it)."""
        return extract_boxed(response)

    def score(self, response: str, reference: str) -> float:
        given = extract_boxed(response)
        return 1.0 if given and given == reference.strip() else 0.0


class StrictMatchReward(MatchReward):
    def score(self, response: str, reference: str) -> float:
        if response.count(BOX) != 1:
            return 0.0
        content, end = box_span(response, response.find(BOX))
        given = content.strip()
        if end is None or response[end:].strip():
            return 0.0
        return 1.0 if given and given == reference.strip() else 0.0
