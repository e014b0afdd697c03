"""Typed records that cross package boundaries: samples, datums, step results.

Token ids and logprobs are plain lists here (core holds no tensors). Datum layout, shared by
every backend: `tokens` = prompt ids + completion ids; `logprobs` and `advantages` have the
same length, 0.0 on prompt positions, and position j holds the value for token j (predicted
at position j-1). `mask` marks the tokens the policy sampled: they are the loss's tokens and
what its denominators count, whatever their advantage (a zero advantage is zero credit, not
absence). A datum without a mask counts the tokens whose advantage is non-zero.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

FinishReason = Literal["stop", "length"]


class Completion(msgspec.Struct, kw_only=True):
    """One sampled completion: ids (never the prompt), behaviour logprobs, why it ended."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason = "stop"
    entropies: list[float] | None = None


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    """How one step samples. `want_entropy` asks the backend for the Shannon entropy of each
    sampled position's distribution (`Completion.entropies`); a backend that cannot compute
    it raises instead of returning None."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    want_entropy: bool = False


class Datum(msgspec.Struct, kw_only=True):
    tokens: list[int]
    logprobs: list[float]
    advantages: list[float]
    mask: list[int] | None = None  # 1 on sampled tokens, 0 on prompt (and observation) tokens

    @property
    def prompt_length(self) -> int:
        for i, m in enumerate(self.loss_mask()):
            if m:
                return i
        return len(self.tokens)

    def loss_mask(self) -> list[bool]:
        if self.mask is not None:
            return [bool(m) for m in self.mask]
        return [a != 0.0 for a in self.advantages]


class TrainOutput(msgspec.Struct, kw_only=True):
    """What one optimizer update reports: the token-mean loss and backend diagnostics."""

    loss: float
    tokens: int = 0
    metrics: dict[str, float | int | str] = msgspec.field(default_factory=dict)


class Example(msgspec.Struct, kw_only=True):
    """A prompt with its verifiable reference; `completion` is an SFT target when known.
    `info` and `example_id` carry a source's own per-item data (the reference's fields)."""

    prompt: str
    reference: str = ""
    completion: str = ""
    task: str = "default"
    info: dict[str, Any] | None = None
    example_id: int | str | None = None
