"""retrain's own judge client: one OpenAI-compatible `POST {base_url}/chat/completions` per
question, over the standard library (retrain-core takes no HTTP dependency).

The request is `{"model", "messages": [{"role": "user", "content": question}], "temperature": 0}`
(a deterministic judge is what makes a cached verdict the verdict). The API key, when the
configured variable holds one, goes in `Authorization: Bearer ...` and nowhere else: no error
message or log line quotes it. `timeout_s` is the whole request's deadline (connection, sending,
the status, headers and body, through `retrain.io.http.request`), so a server that stops
answering, or drips its answer, fails the request in `timeout_s`; a reply larger than
`MAX_REPLY_BYTES` fails at once and is not retried.
"""

from __future__ import annotations

import json
from typing import Any

from retrain.io.http import DeadlineExceeded, HttpFailure, Reply, ReplyTooLarge, request
from retrain.rewards.judge.errors import NOT_A_COMPLETION, REQUEST_REFUSED, Refused, Retryable
from retrain.rewards.judge.verdict import Verdict, question, verdict_of

RETRY_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))
EXCERPT = 120
#: a chat completion carrying a verdict; a reasoning judge's long reply fits many times over
MAX_REPLY_BYTES = 4 << 20


class HttpJudge:
    client = "http"

    def __init__(self, base_url: str, model: str, api_key: str, timeout_s: float) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.timeout_s = model, timeout_s
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"

    def ask(self, prompt: str, reference: str, response: str) -> Verdict:
        return verdict_of(self.complete(question(prompt, reference, response)))

    def complete(self, content: str) -> str:
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": content}],
                           "temperature": 0}).encode()
        try:
            reply = request("POST", self.url, body=body, headers=self._headers, deadline_s=self.timeout_s,
                            max_bytes=MAX_REPLY_BYTES)
        except DeadlineExceeded as e:
            raise Retryable(str(e), timeout=True) from None
        except ReplyTooLarge as e:
            raise Refused(NOT_A_COMPLETION, str(e)) from None
        except HttpFailure as e:
            raise Retryable(str(e)) from None
        if reply.status >= 300:
            raise _status_error(reply)
        return reply_text(reply.body)


def reply_text(raw: bytes) -> str:
    """The first choice's message content of a chat completion body; `Refused` for anything else."""
    try:
        data: Any = json.loads(raw)
        content = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise Refused(NOT_A_COMPLETION, f"HTTP 200 with body {_excerpt(raw)}") from None
    if not isinstance(content, str):
        raise Refused(NOT_A_COMPLETION, f"message content {content!r:.{EXCERPT}}")
    return content


def _status_error(reply: Reply) -> Exception:
    detail = _excerpt(reply.body)
    message = f"HTTP {reply.status} from {reply.url}" + (f": {detail}" if reply.body.strip() else "")
    if reply.status in RETRY_STATUS:
        return Retryable(message, retry_after=_seconds(reply.header("Retry-After")))
    return Refused(REQUEST_REFUSED, message)


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: the backoff's own delay applies


def _excerpt(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    return repr(text[:EXCERPT] + ("..." if len(text) > EXCERPT else ""))
