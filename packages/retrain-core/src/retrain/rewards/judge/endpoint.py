"""retrain's own judge client: one OpenAI-compatible `POST {base_url}/chat/completions` per
question, over the standard library (retrain-core takes no HTTP dependency).

The request is `{"model", "messages": [{"role": "user", "content": question}], "temperature": 0}`
(a deterministic judge is what makes a cached verdict the verdict). The API key, when the
configured variable holds one, goes in `Authorization: Bearer ...` and nowhere else: no error
message or log line quotes it. `timeout_s` is the whole request's deadline (connection, sending,
the status, headers and body, through `retrain.io.http.request`), so a server that stops
answering, or drips its answer, fails the request in `timeout_s`; a reply larger than
`MAX_REPLY_BYTES` fails at once and is not retried. `post_json` is the same request for every
client built on it (a reward model's server, a distillation teacher's).
"""

from __future__ import annotations

import json
from typing import Any

from retrain.io.http import DeadlineExceeded, HttpFailure, Reply, ReplyTooLarge, request
from retrain.rewards.judge.errors import NOT_A_COMPLETION, Refused, Retryable
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
        self._headers = json_headers(api_key)

    def ask(self, prompt: str, reference: str, response: str) -> Verdict:
        return verdict_of(self.complete(question(prompt, reference, response)))

    def complete(self, content: str) -> str:
        body = {"model": self.model, "messages": [{"role": "user", "content": content}], "temperature": 0}
        return reply_text(post_json(self.url, body, self._headers, self.timeout_s, too_large=NOT_A_COMPLETION))


def json_headers(api_key: str) -> dict[str, str]:
    """A JSON request's headers, with `Authorization: Bearer <key>` when there is a key."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def post_json(url: str, payload: Any, headers: dict[str, str], timeout_s: float, *, service: str = "a judge",
              too_large: str = NOT_A_COMPLETION, max_bytes: int = MAX_REPLY_BYTES) -> bytes:
    """POST `payload` as JSON and return the 2xx reply's body, the whole request within
    `timeout_s`. `Retryable` for what may pass on another try (the deadline, a connection that
    fails, 408/409/429/5xx, with the server's Retry-After), `Refused` for any other status and
    for a body over `max_bytes` (counted as `too_large`); `service` names the server in the kinds."""
    try:
        reply = request("POST", url, body=json.dumps(payload).encode(), headers=headers, deadline_s=timeout_s,
                        max_bytes=max_bytes)
    except DeadlineExceeded as e:
        raise Retryable(str(e), timeout=True, service=service) from None
    except ReplyTooLarge as e:
        raise Refused(too_large, str(e)) from None
    except HttpFailure as e:
        raise Retryable(str(e), service=service) from None
    if reply.status >= 300:
        raise _status_error(reply, service)
    return reply.body


def reply_text(raw: bytes) -> str:
    """The first choice's message content of a chat completion body; `Refused` for anything else."""
    try:
        data: Any = json.loads(raw)
        content = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise Refused(NOT_A_COMPLETION, f"HTTP 200 with body {excerpt(raw)}") from None
    if not isinstance(content, str):
        raise Refused(NOT_A_COMPLETION, f"message content {content!r:.{EXCERPT}}")
    return content


def _status_error(reply: Reply, service: str) -> Exception:
    message = f"HTTP {reply.status} from {reply.url}" + (f": {excerpt(reply.body)}" if reply.body.strip() else "")
    if reply.status in RETRY_STATUS:
        return Retryable(message, retry_after=_seconds(reply.header("Retry-After")), service=service)
    return Refused(f"{service} request the server refused", message)  # the judge's: REQUEST_REFUSED


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: the backoff's own delay applies


def excerpt(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    return repr(text[:EXCERPT] + ("..." if len(text) > EXCERPT else ""))
