"""Planning-token detectors (spec algorithms.md §16)."""

import numpy as np
import pytest

from retrain.config.schema import LoggingConfig, PlanningConfig, TrainConfig
from retrain.planning.create import build_detector
from retrain.planning.regex import RegexDetector
from retrain.planning.semantic import SemanticDetector
from retrain.planning.tokens import DEFAULT_GRAMS, parse_grams
from retrain.planning.types import PlanningUnavailable
from retrain.registry.health import module_available


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        # Decision (docs/advantages.md): only the phrase's own tokens are marked. The reference also
        # marked tokens before the gram inside its window: [1,1,1,1,1,0,0] and [1,1,1,1,0] here.
        (
            ["\u0120Wait", ",", "\u0120let", "\u0120me", "\u0120check", ":", "\u01202"],
            [0, 0, 1, 1, 1, 0, 0],
        ),
        (["\u2581So", "\u2581the", "\u2581key", "\u2581is", "\u2581x"], [0, 1, 1, 1, 0]),
        (["Let", "me", "ver", "ify"], [0, 0, 0, 0]),
        (["Let", "me", "verify"], [1, 1, 1]),
        (["a", "b", "c", "d", "e", "f", "let", "me", "think"], [0, 0, 0, 0, 0, 0, 1, 1, 1]),
    ],
)
def test_regex_worked_examples(tokens, expected):
    assert RegexDetector().mask(tokens).tolist() == expected


def test_regex_overlapping_grams_and_punctuation():
    d = RegexDetector()
    assert d.mask(["wait", "let", "me", "check"]).tolist() == [1, 1, 1, 1]
    assert d.mask(["Wait", ",", "let", "me"]).tolist() == [0, 0, 0, 0]
    assert d.mask(["that\u2019s", "not", "right"]).tolist() == [0, 0, 0]
    assert d.mask(["that's", "not", "right"]).tolist() == [1, 1, 1]
    assert d.mask([]).tolist() == []
    assert RegexDetector([]).mask(["let", "me", "think"]).tolist() == [0, 0, 0]


def test_regex_window_limits_a_match_span():
    d = RegexDetector(["let me think"])
    spread = ["let", "", "", "", "", "me", "think"]  # empty pieces widen the span past 5 tokens
    assert d.mask(spread).tolist() == [0] * 7


def test_grams_parsing():
    assert parse_grams("") == DEFAULT_GRAMS and len(DEFAULT_GRAMS) == 18
    assert parse_grams('["a b", " ", "c"]') == ("a b", "c")
    assert parse_grams("x y, z ,") == ("x y", "z")
    assert parse_grams(["q"]) == ("q",)
    d = build_detector(TrainConfig(logging=LoggingConfig(strategic_grams="hmm so")))
    assert d.mask(["Hmm", "so", "x"]).tolist() == [1, 1, 0]


class FakeEncoder:
    """Embeds text on two axes: planning words vs digits/arithmetic words."""

    PLAN = frozenset(
        {"wait", "reconsider", "rethink", "plan", "verify", "strategy", "check", "step", "back"}
    )

    def encode(self, sentences, *, batch_size, normalize_embeddings):
        out = []
        for s in sentences:
            words = s.lower().replace(",", " ").split()
            plan = sum(w in self.PLAN for w in words)
            calc = sum(
                any(ch.isdigit() for ch in w) or w in {"plus", "times", "equals", "multiply"}
                for w in words
            )
            v = np.array([plan + 0.1, calc + 0.1, 0.3])
            out.append(v / np.linalg.norm(v))
        return np.array(out)


def test_semantic_detector_with_an_injected_encoder():
    d = SemanticDetector(encoder=FakeEncoder(), threshold=0.02)
    tokens = [
        "2",
        "plus",
        "3",
        "equals",
        "5",
        "times",
        "4",
        "equals",
        "20",
        "so",
        "x",
        "equals",
        "7",
        "wait",
        "let",
        "me",
        "step",
        "back",
        "and",
        "reconsider",
        "the",
        "plan",
        "and",
        "check",
        "strategy",
        "verify",
    ]
    mask = d.mask(tokens).tolist()
    assert len(mask) == len(tokens)
    assert mask[-1] == 1 and mask[0] == 0
    assert d.mask(["one", "two"]).tolist() == [0, 0]  # fewer than 3 words


@pytest.mark.skipif(
    module_available("sentence_transformers"), reason="sentence-transformers installed"
)
def test_semantic_detector_names_its_package():
    with pytest.raises(PlanningUnavailable, match="sentence-transformers"):
        build_detector(TrainConfig(planning=PlanningConfig(detector="semantic")))


def test_function_plugin_detector():
    from retrain.registry.core import register, unregister

    register("planning_detector", "test_first", lambda tokens: [1] + [0] * (len(tokens) - 1))
    try:
        d = build_detector(TrainConfig(planning=PlanningConfig(detector="test_first")))
        assert d.mask(["a", "b"]).tolist() == [1, 0]
    finally:
        unregister("planning_detector", "test_first")
