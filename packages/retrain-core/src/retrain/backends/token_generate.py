"""vLLM's token-in/token-out endpoint, `POST /inference/v1/generate`, as retrain's servers speak
it (`retrain serve`, and the policy endpoint a verifiers multi-turn Env samples from): the
request names prompt token ids and sampling parameters, the answer gives the sampled token ids,
each one's behaviour logprob and the finish reason. verifiers' `TrainClient` (through the
`renderers` package) is the client; its request and answer shapes are what this module reads
and writes.

Sampling keys retrain does not honour are refused (`ServeError` naming the key), never
ignored; `stop_token_ids` must be among the tokenizer's end-of-sequence ids, where retrain's
samplers stop anyway.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from retrain.backends.serving import ServeError
from retrain.types import SamplingParams

PATH = "/inference/v1/generate"
#: sampling_params keys read here; `logprobs` (always given) and `skip_special_tokens`
#: (token ids are answered, never text) change nothing in the answer
SAMPLING_KEYS = frozenset({"max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop_token_ids",
                           "logprobs", "skip_special_tokens"})
BODY_KEYS = frozenset({"model", "token_ids", "sampling_params", "cache_salt", "priority"})


def prompt_of(body: Any) -> list[int]:
    if not isinstance(body, Mapping):
        raise ServeError("the body must be a JSON object")
    extra = sorted(set(body) - BODY_KEYS)
    if extra:
        raise ServeError(f"{extra[0]} is not supported", param=extra[0])
    prompt = body.get("token_ids")
    if not isinstance(prompt, list) or not prompt or not all(type(t) is int and t >= 0 for t in prompt):
        raise ServeError("token_ids must be a non-empty list of token ids", param="token_ids")
    return list(prompt)


def sampling_of(raw: Any, base: SamplingParams, stop_token_ids: Collection[int]) -> SamplingParams:
    """The request's sampling over `base` (what the server would use unasked)."""
    if raw is None:
        return base
    if not isinstance(raw, Mapping):
        raise ServeError("sampling_params must be an object", param="sampling_params")
    unknown = sorted(set(raw) - SAMPLING_KEYS)
    if unknown:
        raise ServeError(f"sampling_params.{unknown[0]} is not supported", param=f"sampling_params.{unknown[0]}")
    stops = set(raw.get("stop_token_ids") or [])
    if not stops <= set(stop_token_ids):
        raise ServeError(f"sampling_params.stop_token_ids {sorted(stops - set(stop_token_ids))} are not the "
                         f"tokenizer's end-of-sequence ids {sorted(stop_token_ids)}, where sampling stops",
                         param="sampling_params.stop_token_ids")

    def number(key: str, kind: type, low: float, default: Any) -> Any:
        value = raw.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
            raise ServeError(f"sampling_params.{key} must be a number", param=f"sampling_params.{key}")
        if value < low:
            raise ServeError(f"sampling_params.{key} must be >= {low}", param=f"sampling_params.{key}")
        return kind(value)

    top_k = number("top_k", int, -1, base.top_k)
    return SamplingParams(max_tokens=number("max_tokens", int, 1, base.max_tokens),
                          temperature=number("temperature", float, 0, base.temperature),
                          top_p=number("top_p", float, 0, base.top_p), top_k=max(top_k, 0),
                          min_p=number("min_p", float, 0, base.min_p), want_entropy=base.want_entropy,
                          batch_id=base.batch_id, seed=number("seed", int, 0, base.seed))


def answer(prompt: Sequence[int], token_ids: Sequence[int], logprobs: Sequence[float],
           finish_reason: str) -> dict[str, Any]:
    return {"request_id": uuid.uuid4().hex, "prompt_token_ids": list(prompt),
            "choices": [{"index": 0, "token_ids": list(token_ids), "finish_reason": finish_reason,
                         "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": lp}
                                                  for t, lp in zip(token_ids, logprobs, strict=True)]}}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(token_ids),
                      "total_tokens": len(prompt) + len(token_ids)}}
