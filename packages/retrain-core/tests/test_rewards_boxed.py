r"""Boxed-answer rewards (spec algorithms.md §15): extract_boxed, match, strict."""

import pytest

from retrain.rewards.boxed import MatchReward, StrictMatchReward, extract_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is \\boxed{42}.", "42"),
        ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{x^{2}+1", "x^{2}+1"),
        ("\\boxed{a}}b", "a"),
        ("\\boxed{ 7 }", "7"),
        ("no box", ""),
        ("\\boxed {3} and \\fbox{4}", ""),
    ],
)
def test_extract_boxed_worked_examples(text, expected):
    assert extract_boxed(text) == expected


def test_match_worked_examples():
    m = MatchReward()
    assert m.score("\\boxed{0.5}", "\\frac{1}{2}") == 0.0
    assert m.score("\\boxed{ 5 }", " 5") == 1.0
    # Decision (docs/advantages.md): no answer never matches; the reference gave 1.0 here.
    assert m.score("nothing", "") == 0.0
    assert m.score("\\boxed{}", "") == 0.0


def test_strict_needs_one_box_at_the_end():
    s = StrictMatchReward()
    assert s.score("\\boxed{5}", "5") == 1.0
    assert s.score("so the sum is \\boxed{5}\n", "5") == 1.0
    assert s.score("\\boxed{5}}}}", "5") == 0.0  # EOS drift
    assert s.score("\\boxed{5} because", "5") == 0.0
    assert s.score("\\boxed{4} or \\boxed{5}", "5") == 0.0
    assert s.score("\\boxed{5", "5") == 0.0
    assert s.score("\\boxed{6}", "5") == 0.0


@pytest.mark.parametrize(("response", "reference", "score"), [
    ("\\boxed{8}", "8", 1.0),                    # strict: full credit
    ("3 + 5 = \\boxed{8}", "8", 1.0),
    ("\\boxed{8} because 3 + 5", "8", 0.5),      # the answer, text after the box
    ("\\boxed{8}\\boxed{8}", "8", 0.5),          # the answer, two boxes
    ("3 + 5 is 8.", "8", 0.5),                    # the answer unboxed, the last number
    ("1,008 in all", "1008", 0.5),                # thousands commas dropped
    ("\\boxed{7}", "8", 0.2),                    # the form without the answer
    ("8 or maybe 9", "8", 0.0),                   # the last number is not the answer
    ("no idea", "8", 0.0),
    ("\\boxed{}", "", 0.0),                      # an empty reference scores nothing
])
def test_partial_credit(response: str, reference: str, score: float) -> None:
    from retrain.rewards.boxed import PartialCreditReward
    assert PartialCreditReward().score(response, reference) == score


def test_partial_credit_never_counts_as_correct() -> None:
    from retrain.rewards.boxed import PARTIAL_ANSWER, PARTIAL_FORM
    assert max(PARTIAL_ANSWER, PARTIAL_FORM) <= 0.5  # correct_rate and pass@k count reward > 0.5
