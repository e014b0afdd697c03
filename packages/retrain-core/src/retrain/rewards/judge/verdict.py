"""What the judge is asked and how its reply becomes a score.

The question fills one template with the prompt the policy answered, the reference answer and
the response. The verdict is the reference implementation's rule: 1.0 when the lower-cased
reply contains "yes", else 0.0. A reply with neither "yes" nor the word "no" still scores 0.0
under that rule, and is counted as unclear (`judge/unclear` in the step row) so that a judge
that does not follow the format shows up instead of passing for a strict one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_MODEL = "gpt-4o-mini"
#: bumped whenever the template or the verdict rule changes: cached verdicts are keyed by it
TEMPLATE_VERSION = 1

TEMPLATE = """Grade a response to a question against the reference answer.

Question:
{question}

Reference answer:
{reference}

Response:
{response}

Does the response give the reference answer (the wording may differ)? Reply "yes" or "no" only."""

_NO = re.compile(r"\bno\b")


@dataclass(frozen=True)
class Verdict:
    score: float
    clear: bool = True  # the reply said yes or no


def question(prompt: str, reference: str, response: str) -> str:
    return TEMPLATE.format(question=prompt.strip(), reference=reference.strip(), response=response.strip())


def verdict_of(reply: str) -> Verdict:
    text = reply.lower()
    if "yes" in text:
        return Verdict(1.0)
    return Verdict(0.0, clear=bool(_NO.search(text)))
