"""The semantic planning detector on the real all-MiniLM-L6-v2 (the packaged model, loaded
offline), the window and threshold semantics of spec algorithms.md §16 on hand-made token
lists, and the one-line refusals when a piece is missing."""

from __future__ import annotations

import pytest

from retrain.config.schema import PlanningConfig, TrainConfig
from retrain.planning import semantic
from retrain.planning.create import build_detector
from retrain.planning.semantic import SemanticDetector, model_folder
from retrain.planning.types import PlanningUnavailable
from retrain.registry.health import module_available

needs_model = pytest.mark.skipif(
    not (module_available("sentence_transformers") and module_available(semantic.PACKAGED_MODULE)),
    reason="needs retrain-core[semantic] (a dev dependency)")

PLAN = "wait I think I made an error earlier so let me step back and rethink the whole approach before going on"
EXEC = "multiply both sides by three so x equals seven then add twelve and nineteen to get thirty one"
MIXED = EXEC + " . hold on , I should reconsider this , maybe there is a simpler method to see it"


def tokens(text: str) -> list[str]:
    return ["Ġ" + w for w in text.split()]


@pytest.fixture(scope="module")
def encoder():  # type: ignore[no-untyped-def]
    return semantic.load_encoder("all-MiniLM-L6-v2")


def detector(encoder, threshold: float = 0.02) -> SemanticDetector:  # type: ignore[no-untyped-def]
    return SemanticDetector(encoder=encoder, threshold=threshold)


@needs_model
def test_default_model_is_the_packaged_one() -> None:
    folder = model_folder("all-MiniLM-L6-v2")
    assert "site-packages" in str(folder) and (folder / "model.safetensors").is_file()
    assert model_folder("sentence-transformers/all-MiniLM-L6-v2") == folder
    assert model_folder(str(folder)) == folder


@needs_model
def test_verdicts(encoder) -> None:  # type: ignore[no-untyped-def]
    d = detector(encoder)
    assert d.mask(tokens(PLAN)).tolist() == [1] * 21  # reflective throughout: every window is planning
    assert d.mask(tokens(EXEC)).tolist() == [0] * 18  # arithmetic steps: none is
    # 36 words, windows start at 0, 6, 12, 18, 24: the last two hold the reflection and mark
    # words 18..35; the window at 12 straddles both and is not planning
    assert d.mask(tokens(MIXED)).tolist() == [0] * 18 + [1] * 18
    assert d.mask(tokens("let me")).tolist() == [0, 0]  # fewer than 3 words


@needs_model
def test_threshold_drops_the_weaker_windows(encoder) -> None:  # type: ignore[no-untyped-def]
    # PLAN's windows start at 0, 6 and 9 (the last ends at the final word); their margins
    # sim_plan - sim_exec grow from about 0.13 to 0.33 and 0.43
    assert detector(encoder, 0.2).mask(tokens(PLAN)).tolist() == [0] * 6 + [1] * 15
    assert detector(encoder, 0.38).mask(tokens(PLAN)).tolist() == [0] * 9 + [1] * 12
    assert detector(encoder, 0.9).mask(tokens(PLAN)).tolist() == [0] * 21


@needs_model
def test_words_map_back_to_their_tokens(encoder) -> None:  # type: ignore[no-untyped-def]
    # two words per token, and an empty piece between: the marked span runs from the token of
    # a window's first word to the token of its last
    words = PLAN.split()
    pieces = ["Ġ" + " ".join(words[i:i + 2]) for i in range(0, 20, 2)] + ["Ġ", "Ġ" + words[20]]
    assert detector(encoder).mask(pieces).tolist() == [1] * 12


def test_missing_package_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(semantic, "module_available", lambda name: False)
    with pytest.raises(PlanningUnavailable, match="needs the 'sentence-transformers' package"):
        build_detector(TrainConfig(planning=PlanningConfig(detector="semantic")))


def test_missing_model_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(semantic, "module_available", lambda name: name != semantic.PACKAGED_MODULE)
    with pytest.raises(PlanningUnavailable, match="needs the packaged model all-MiniLM-L6-v2"):
        model_folder("all-MiniLM-L6-v2")
    with pytest.raises(PlanningUnavailable, match="'some/hub-model' is not a local folder"):
        model_folder("some/hub-model")
