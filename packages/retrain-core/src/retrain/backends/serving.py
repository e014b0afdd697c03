"""The serving contract between `retrain serve` (the HTTP side, in retrain-cli) and a
backend's serving engine (the model side): what a request carries, what a row of the answer
holds, and how the model side refuses a request. A backend offers an engine through its
`BackendDefinition.serving` factory `(TrainConfig) -> engine`; the engine takes
`ServeRequest`s and answers `ServedRow`s (the local backend's is
`retrain.inference_engine.pytorch.serving.ServingEngine`)."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass, field

from retrain.types import SamplingParams

#: the seeds a request may ask for: a 64-bit signed integer, what torch's generators (and vLLM) take
SEED_MIN, SEED_MAX = -(2 ** 63), 2 ** 63 - 1

#: (row within the request, token id, behaviour logprob, top alternatives, text delta)
TokenEvent = tuple[int, int, float, list[tuple[int, float]] | None, str]


class ServeError(ValueError):
    """A request the model side refuses; `status` is the HTTP status, `param` the field."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param = status, param


@dataclass
class ServeRequest:
    prompts: list[list[int]]
    n: int
    params: SamplingParams
    adapter: str | None = None  # None: the base model
    seed: int | None = None
    top_n: int = 0
    stop: list[str] = field(default_factory=list)
    include_stop: bool = False
    skip_special_tokens: bool = True
    on_token: Callable[[TokenEvent], None] | None = None  # called on the worker thread
    #: vLLM's `prompt_logprobs`: score every prompt token (and this many top alternatives); None: no
    prompt_logprobs: int | None = None


@dataclass
class ServedRow:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    text: str
    top: list[list[tuple[int, float]]] | None = None
    #: per prompt position (None at the first), {token id: (logprob, rank)}: the prompt's own token
    #: and the top alternatives asked for; None when the request did not ask
    prompt_logprobs: list[dict[int, tuple[float, int]] | None] | None = None


UNAUTHORIZED = "a valid API key is required (Authorization: Bearer <key>)"


def authorized(authorization: str, key: bytes) -> bool:
    """Whether an `Authorization` header carries `Bearer <key>`, compared in constant time."""
    token = authorization[7:].encode() if authorization.lower().startswith("bearer ") else b""
    return hmac.compare_digest(token, key)
