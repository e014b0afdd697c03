"""A reward model behind a server: `POST {model_url}/classify`, vLLM's classification endpoint
(`vllm serve CHECKPOINT` of a sequence-classification model), through the judge's HTTP code.

The contract, for any server that stands in: the request is
`{"model": <[reward] model>, "input": [text, ...], "use_activation": false}`; the reply is
`{"data": [{"index": i, "probs": [logit, ...]}, ...]}`, one entry per text, `probs` holding the
head's raw logits (`use_activation = false`: no sigmoid or softmax on the server, so retrain
normalises the same way whichever side runs the model). The API key, when the variable names
one, goes in `Authorization: Bearer ...` and nowhere else.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

from retrain.rewards.judge.endpoint import excerpt, json_headers, post_json
from retrain.rewards.judge.errors import Refused

SERVICE = "a reward model"
NOT_CLASSIFIED = "a reward-model reply that is not a classification"


class ClassifierServer:
    def __init__(self, url: str, model: str, *, api_key_env: str = "", timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/") + "/classify"
        self.model, self.timeout_s = model, timeout_s
        self.name = f"{model} at {url}"
        self._headers = json_headers(os.environ.get(api_key_env, "") if api_key_env else "")

    def classify(self, texts: Sequence[str]) -> list[list[float]]:
        body = {"model": self.model, "input": list(texts), "use_activation": False}
        raw = post_json(self.url, body, self._headers, self.timeout_s, service=SERVICE, too_large=NOT_CLASSIFIED)
        return parse_classification(raw, len(texts))

    def close(self) -> None:
        return None


def parse_classification(raw: bytes, n: int) -> list[list[float]]:
    """The logits of each of `n` texts, in order; `Refused` for any other reply."""
    try:
        data: Any = json.loads(raw)["data"]
        rows = sorted(data, key=lambda d: int(d["index"]))
        out = [[float(v) for v in row["probs"]] for row in rows]
    except (ValueError, KeyError, TypeError):
        raise Refused(NOT_CLASSIFIED, f"HTTP 200 with body {excerpt(raw)}") from None
    if len(out) != n or [int(d["index"]) for d in rows] != list(range(n)):
        raise Refused(NOT_CLASSIFIED, f"{len(out)} classifications for {n} texts")
    if any(not v or not all(math.isfinite(x) for x in v) for v in out):
        raise Refused(NOT_CLASSIFIED, "a classification without finite logits")
    return out
