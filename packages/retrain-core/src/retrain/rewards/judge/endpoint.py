"""retrain's own judge client: one OpenAI-compatible `POST {base_url}/chat/completions` per
question, over the standard library (retrain-core takes no HTTP dependency).

The request is `{"model", "messages": [{"role": "user", "content": question}], "temperature": 0}`
(a deterministic judge is what makes a cached verdict the verdict). The API key, when the
configured variable holds one, goes in `Authorization: Bearer ...` and nowhere else: no error
message or log line quotes it. `timeout_s` bounds every wait on the socket (the connection and
each read), so a server that stops answering fails the request in `timeout_s`.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

from retrain.rewards.judge.errors import NOT_A_COMPLETION, Refused, Retryable
from retrain.rewards.judge.verdict import Verdict, question, verdict_of

RETRY_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))
EXCERPT = 120


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
        return reply_text(post_json(self.url, body, self._headers, self.timeout_s))


def json_headers(api_key: str) -> dict[str, str]:
    """A JSON request's headers, with `Authorization: Bearer <key>` when there is a key."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def post_json(url: str, payload: Any, headers: dict[str, str], timeout_s: float, *,
              service: str = "a judge") -> bytes:
    """POST `payload` as JSON and return the reply's body. `Retryable` for what may pass on
    another try (a timeout, a connection that fails, 408/409/429/5xx, with the server's
    Retry-After), `Refused` for any other status; `service` names the server in their kinds.
    Every wait on the socket is bounded by `timeout_s`."""
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            raw: bytes = answer.read()
    except urllib.error.HTTPError as e:
        raise _status_error(e, service) from None
    except TimeoutError:
        raise Retryable(f"no reply from {url} within {timeout_s:g}s", timeout=True, service=service) from None
    except urllib.error.URLError as e:
        if isinstance(e.reason, (TimeoutError, socket.timeout)):
            raise Retryable(f"no reply from {url} within {timeout_s:g}s", timeout=True, service=service) from None
        raise Retryable(f"{url}: {e.reason}", service=service) from None
    except (ConnectionError, OSError) as e:
        raise Retryable(f"{url}: {e}", service=service) from None
    return raw


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


def _status_error(e: urllib.error.HTTPError, service: str) -> Exception:
    try:
        detail = excerpt(e.read())
    except OSError:
        detail = ""
    message = f"HTTP {e.code} from {e.url}" + (f": {detail}" if detail else "")
    if e.code in RETRY_STATUS:
        return Retryable(message, retry_after=_seconds(e.headers.get("Retry-After")), service=service)
    return Refused(f"{service} request the server refused", message)  # the judge's: REQUEST_REFUSED


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: the backoff's own delay applies


def excerpt(raw: bytes) -> str:
    """The start of a body, quoted, for an error message."""
    text = raw.decode("utf-8", "replace").strip()
    return repr(text[:EXCERPT] + ("..." if len(text) > EXCERPT else ""))
