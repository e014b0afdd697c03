"""`[data] answer_pattern`: how a reference is taken from a row's answer text.

A preset names the convention of a well-known data set; anything else is a regular expression
whose first group (else its whole match) at the first place it matches is the reference. The
result is stripped; an answer the pattern does not match has no reference (the row is dropped
and counted).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from retrain.rewards.boxed import extract_boxed

#: a number as written in answers: sign, thousands separators, decimals
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def _gsm8k(text: str) -> str:
    """GSM8K's solutions end with `#### 72`: the text after the last `####`, commas dropped
    (the reading verl's and OpenRLHF's GSM8K recipes use)."""
    at = text.rfind("####")
    return text[at + 4:].strip().replace(",", "") if at >= 0 else ""


def _last_number(text: str) -> str:
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else ""


PRESETS: dict[str, Callable[[str], str]] = {"gsm8k": _gsm8k, "boxed": extract_boxed, "last_number": _last_number}


def pattern_problem(pattern: str) -> str:
    """Why `pattern` is neither a preset nor a regular expression, or ''."""
    if not pattern or pattern in PRESETS:
        return ""
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"{pattern!r} is not a preset ({', '.join(PRESETS)}) nor a regular expression ({exc})"
    return ""


def answer_extractor(pattern: str) -> Callable[[str], str]:
    """The reference of an answer text under `pattern` ('' = the text itself, stripped)."""
    if not pattern:
        return str.strip
    if pattern in PRESETS:
        return PRESETS[pattern]
    regex = re.compile(pattern)

    def extract(text: str) -> str:
        found = regex.search(text)
        if found is None:
            return ""
        return ((found.group(1) if regex.groups else found.group(0)) or "").strip()

    return extract
