"""Teacher and student must share a tokenizer: the teacher scores the student's token ids, so a
teacher that reads them as other text gives a signal about nothing. Checked at start by each
kind of teacher (a local one compares vocabularies, a server one tokenizes `PROBE`)."""

from __future__ import annotations

from retrain.errors import UserError

#: a text with digits, markup, punctuation, accents, CJK and an emoji: tokenizers that differ
#: anywhere common tend to split it differently
PROBE = "Teacher probe: 12 + 34 = \\boxed{46}. Déjà vu — naïve café; 你好, 世界! 🙂 <|end|>\n\tdone"


class TokenizerMismatch(UserError, ValueError):
    """The teacher's tokenizer is not the student's."""


def mismatch(teacher: str, student: str, detail: str) -> TokenizerMismatch:
    return TokenizerMismatch(
        f"[teacher] model = {teacher!r} and [model] model = {student!r} do not share a tokenizer ({detail}): "
        "the teacher would score the student's token ids as other text",
        hint="distil from a teacher of the student's family (the same tokenizer)")
