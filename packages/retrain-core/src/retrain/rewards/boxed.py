r"""Exact-answer rewards on the last `\boxed{...}` of a response.

`match`: 1.0 iff the content of the last box equals the reference (both stripped); plain
string equality, no normalisation (`math` normalises). A response without a box, or with an
empty one, scores 0.0 even when the reference is empty (the reference scored 1.0 there,
rewarding non-answers whenever a data set lacked a reference).

`strict`: `match` plus form: exactly one box, and nothing but whitespace after it. It stops
the "EOS drift" seen with `match` on small models (`\boxed{5}}}}` until max tokens), because
text after the box is no longer free.

`partial`: `strict`'s 1.0, with partial credit below it so a model that rarely boxes still
gets signal: 0.5 for the right answer in the wrong form (the last box holds it but the form
is not `strict`'s, or there is no box and the last number of the response equals the
reference), 0.2 for the form without the answer (a box, wrong content), else 0.0. Every
partial score stays at or below 0.5, so the correct rate (reward > 0.5) and pass@k count only
`strict` answers.
"""

from __future__ import annotations

import re

BOX = "\\boxed{"
#: the last number of a response: an optional sign, digits with optional thousands commas, decimals
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
PARTIAL_ANSWER = 0.5
PARTIAL_FORM = 0.2


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


def last_number(text: str) -> str:
    """The last number in `text` with its thousands commas dropped, or ""."""
    found = NUMBER.findall(text)
    return found[-1].replace(",", "") if found else ""


class PartialCreditReward(StrictMatchReward):
    def score(self, response: str, reference: str) -> float:
        if super().score(response, reference) == 1.0:
            return 1.0
        want = reference.strip()
        if not want:
            return 0.0
        given = extract_boxed(response)
        if BOX in response:
            return PARTIAL_ANSWER if given == want else PARTIAL_FORM
        return PARTIAL_ANSWER if last_number(response) == want.replace(",", "") else 0.0
