"""ECHO's compatibility path (spec algorithms.md §11): turns that each report their whole prompt
are stitched into segments while each prompt extends the token stream, a rewritten prompt starts
a new segment and its overlap with the stream is recorded, ECHO counts the low-overlap splits,
and the stitched rows give the spec's worked example."""

from __future__ import annotations

import math

import pytest

from retrain.rollout.episode import Episode, echo_layout
from retrain.rollout.stitch import PromptedTurn, prefix_overlap, stitch
from retrain.training.echo import EchoSettings, echo_weights


def turn(prompt: list[int], sampled: list[int], mask: list[int] | None = None) -> PromptedTurn:
    return PromptedTurn(prompt_ids=prompt, token_ids=sampled, logprobs=[-1.0] * len(sampled), observation_mask=mask)


WORKED = [turn([1, 2, 3], [4, 5]), turn([1, 2, 3, 4, 5, 6, 7], [8]), turn([1, 2, 9, 9, 9], [10]),
          turn([1, 2, 9, 9, 9, 10, 11], [12])]


def test_the_docstring_example_stitches_into_two_segments() -> None:
    first, second = stitch(WORKED).segments
    assert first.prompt_ids == [1, 2, 3] and first.overlap == 1.0
    assert [(t.observation, t.token_ids) for t in first.turns] == [([], [4, 5]), ([6, 7], [8])]
    assert second.prompt_ids == [1, 2, 9, 9, 9] and second.overlap == pytest.approx(2 / 5)
    assert [(t.observation, t.token_ids) for t in second.turns] == [([], [10]), ([11], [12])]
    # each segment's datum is the stream the policy saw, with its own tokens marked
    (d1, d2) = Episode(segments=[first, second]).datums([0.5] * 5)
    assert d1.tokens == [1, 2, 3, 4, 5, 6, 7, 8] and d1.mask == [0, 0, 0, 1, 1, 0, 0, 1]
    assert d2.tokens == [1, 2, 9, 9, 9, 10, 11, 12] and d2.mask == [0, 0, 0, 0, 0, 1, 0, 1]


def test_prefix_overlap_is_the_common_prefix_over_the_shorter() -> None:
    assert prefix_overlap([1, 2, 3, 4], [1, 2, 9]) == pytest.approx(2 / 3)
    assert prefix_overlap([1, 2], [1, 2, 3]) == 1.0 and prefix_overlap([], [1]) == 0.0
    assert prefix_overlap([5], [1, 2]) == 0.0


def test_a_prompt_long_mask_marks_the_environments_tokens_and_a_bad_one_is_counted() -> None:
    turns = [turn([1, 2], [3]), turn([1, 2, 3, 70, 71, 72], [4], mask=[0, 0, 0, 0, 1, 1]),
             turn([1, 2, 3, 70, 71, 72, 4, 80, 81], [5], mask=[1, 1])]
    out = stitch(turns)
    (seg,) = out.segments
    assert [t.observation for t in seg.turns] == [[], [70, 71, 72], [80, 81]]
    assert echo_layout(seg) == [False, False, True, True, False, False, False, False]
    assert out.bad_masks == 1  # a mask of the wrong length: its observation gets no ECHO weight


def test_echo_counts_the_splits_under_min_prompt_overlap() -> None:
    settings = EchoSettings(weight=0.05, retention="all", max_tokens_per_step=2048, max_token_ratio=0.5,
                            entropy_floor=0.0, min_prompt_overlap=0.5)
    episode = Episode(segments=stitch(WORKED).segments)
    _, metrics = echo_weights(settings, [episode], [-1.0] * 5)
    assert metrics["echo/split_segments"] == 1.0 and metrics["echo/low_overlap_segments"] == 1.0  # 0.4 < 0.5
    lenient = EchoSettings(**{**settings.__dict__, "min_prompt_overlap": 0.4})
    assert echo_weights(lenient, [episode], [-1.0] * 5)[1]["echo/low_overlap_segments"] == 0.0


def test_the_worked_example_on_a_stitched_rollout() -> None:
    """Spec WE: one rollout, 2 observation tokens with logprob -1 and -3, weight .05, D = 1:
    echo loss (0.05 * 1 + 0.05 * 3) / 2 = 0.1; bounded with 10 sampled tokens: allowed = 5."""
    turns = [turn([1, 2], [3] * 5), turn([1, 2, *[3] * 5, 40, 41], [6] * 5)]
    (seg,) = stitch(turns).segments
    episode = Episode(segments=[seg])
    bounded = EchoSettings(weight=0.05, retention="bounded", max_tokens_per_step=2048, max_token_ratio=0.5,
                           entropy_floor=0.01, min_prompt_overlap=0.5)
    (weights,), metrics = echo_weights(bounded, [episode], [-1.0] * 10)
    observation_lp = {40: -1.0, 41: -3.0}
    after_prompt = [t for turn_ in seg.turns for t in turn_.observation + turn_.token_ids]
    loss = sum(-observation_lp[t] * w for t, w in zip(after_prompt, weights[0], strict=True) if w)
    assert math.isclose(loss, 0.1) and metrics["echo/kept_tokens"] == 2.0
    many = Episode(segments=stitch([turn([1], [3] * 5), turn([1, *[3] * 5, *range(50, 58)], [6] * 5)]).segments)
    _, capped = echo_weights(bounded, [many], [-1.0] * 10)
    assert capped["echo/observation_tokens"] == 8.0 and capped["echo/kept_tokens"] == 5.0  # floor(10 * 0.5)
