"""Single-turn sampling of one step's prompts, shared by the RL loop and the environments
that sample through the training backend."""

from __future__ import annotations

from collections.abc import Sequence

from retrain.backends.protocol import TrainBackend
from retrain.process.spans import span
from retrain.types import Completion, Example, SamplingParams


def sample_texts(backend: TrainBackend, batch: Sequence[tuple[Example, list[int]]], group_size: int,
                 sampling: SamplingParams) -> tuple[list[list[Completion]], list[list[str]], float]:
    """One step's single-turn sampling: `group_size` completions per prompt, their texts, and
    the wall time it took."""
    with span("sample") as timed:
        samples = backend.sample([ids for _, ids in batch], group_size, sampling)
        tok = backend.tokenizer
        texts = [[tok.decode(c.token_ids) for c in group] for group in samples]
    return samples, texts, timed.seconds
