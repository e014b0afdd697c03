"""vLLM's token-in/token-out endpoint, `POST /inference/v1/generate`, as retrain's servers speak
it (`retrain serve`, and the policy endpoint a verifiers multi-turn Env samples from): the
request names prompt token ids and sampling parameters, the answer gives the sampled token ids,
each one's behaviour logprob and the finish reason. verifiers' `TrainClient` (through the
`renderers` package) is the client; its request and answer shapes are what this module reads
and writes.

Sampling keys retrain does not honour are refused (`ServeError` naming the key), never
ignored; every value is checked for its type and range (`SAMPLING_RANGES`) before it reaches a
sampler, so a bad one is a 400 naming it, never a 500; `stop_token_ids` must be a list of the
tokenizer's end-of-sequence ids, where retrain's samplers stop anyway.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from retrain.backends.serving import SEED_MAX, SEED_MIN, ServeError
from retrain.types import SamplingParams

PATH = "/inference/v1/generate"
#: sampling_params keys read here; `logprobs` (always given) and `skip_special_tokens`
#: (token ids are answered, never text) change nothing in the answer
SAMPLING_KEYS = frozenset({"max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop_token_ids",
                           "logprobs", "skip_special_tokens"})
BODY_KEYS = frozenset({"model", "token_ids", "sampling_params", "cache_salt", "priority"})
#: key -> (integer, lowest, highest, lowest excluded, highest excluded)
SAMPLING_RANGES: dict[str, tuple[bool, float, float, bool, bool]] = {
    "max_tokens": (True, 1, 2 ** 31 - 1, False, False),
    "temperature": (False, 0.0, 100.0, False, False),
    "top_p": (False, 0.0, 1.0, True, False),
    "top_k": (True, -1, 2 ** 31 - 1, False, False),
    "min_p": (False, 0.0, 1.0, False, True),
    "seed": (True, SEED_MIN, SEED_MAX, False, False),
    "logprobs": (True, 0, 20, False, False),
}


def prompt_of(body: Any) -> list[int]:
    if not isinstance(body, Mapping):
        raise ServeError("the body must be a JSON object")
    extra = sorted(set(body) - BODY_KEYS)
    if extra:
        raise ServeError(f"{extra[0]} is not supported", param=extra[0])
    prompt = body.get("token_ids")
    if not isinstance(prompt, list) or not prompt or not all(type(t) is int and t >= 0 for t in prompt):
        raise ServeError("token_ids must be a non-empty list of token ids", param="token_ids")
    for key, kind in (("model", str), ("cache_salt", str), ("priority", int)):
        value = body.get(key)
        if value is not None and (type(value) is not kind):
            raise ServeError(f"{key} must be a {'string' if kind is str else 'whole number'}", param=key)
    return list(prompt)


def model_of(body: Mapping[str, Any], default: str) -> str:
    """The model the body names (`prompt_of` checked it is a string), else `default`."""
    model = body.get("model")
    return model if isinstance(model, str) else default


def sampling_of(raw: Any, base: SamplingParams, stop_token_ids: Collection[int]) -> SamplingParams:
    """The request's sampling over `base` (what the server would use unasked)."""
    if raw is None:
        return base
    if not isinstance(raw, Mapping):
        raise ServeError("sampling_params must be an object", param="sampling_params")
    unknown = sorted(set(raw) - SAMPLING_KEYS)
    if unknown:
        raise ServeError(f"sampling_params.{unknown[0]} is not supported", param=f"sampling_params.{unknown[0]}")
    _stops(raw.get("stop_token_ids"), stop_token_ids)
    skip = raw.get("skip_special_tokens")
    if skip is not None and not isinstance(skip, bool):
        raise ServeError("sampling_params.skip_special_tokens must be true or false",
                         param="sampling_params.skip_special_tokens")
    got = {key: _number(raw, key) for key in SAMPLING_RANGES}

    def pick(key: str, default: Any) -> Any:
        return default if got[key] is None else got[key]

    return SamplingParams(max_tokens=pick("max_tokens", base.max_tokens),
                          temperature=pick("temperature", base.temperature), top_p=pick("top_p", base.top_p),
                          top_k=max(pick("top_k", base.top_k), 0), min_p=pick("min_p", base.min_p),
                          want_entropy=base.want_entropy, batch_id=base.batch_id, seed=pick("seed", base.seed))


def _number(raw: Mapping[str, Any], key: str) -> int | float | None:
    """The value of `key` checked against `SAMPLING_RANGES`; None when absent or null."""
    value = raw.get(key)
    if value is None:
        return None
    integer, low, high, open_low, open_high = SAMPLING_RANGES[key]
    param = f"sampling_params.{key}"
    number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not number or (integer and not float(value).is_integer()):
        raise ServeError(f"{param} must be {'a whole number' if integer else 'a finite number'}, got {value!r:.40}",
                         param=param)
    if value < low or value > high or (open_low and value == low) or (open_high and value == high):
        interval = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}" if not integer \
            else f"[{int(low)}, {int(high)}]"
        raise ServeError(f"{param} must be in {interval}, got {value!r:.40}", param=param)
    return int(value) if integer else float(value)


def _stops(raw: Any, eos: Collection[int]) -> None:
    if raw is None:
        return
    param = "sampling_params.stop_token_ids"
    if not isinstance(raw, list) or not all(type(t) is int for t in raw):
        raise ServeError(f"{param} must be a list of token ids", param=param)
    if not set(raw) <= set(eos):
        raise ServeError(f"{param} {sorted(set(raw) - set(eos))} are not the tokenizer's end-of-sequence ids "
                         f"{sorted(eos)}, where sampling stops", param=param)


def answer(prompt: Sequence[int], token_ids: Sequence[int], logprobs: Sequence[float],
           finish_reason: str) -> dict[str, Any]:
    return {"request_id": uuid.uuid4().hex, "prompt_token_ids": list(prompt),
            "choices": [{"index": 0, "token_ids": list(token_ids), "finish_reason": finish_reason,
                         "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": lp}
                                                  for t, lp in zip(token_ids, logprobs, strict=True)]}}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(token_ids),
                      "total_tokens": len(prompt) + len(token_ids)}}
