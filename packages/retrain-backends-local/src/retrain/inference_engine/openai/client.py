"""One pooled async HTTP client per server, on its own event-loop thread, with bounded retries.

The trainer is synchronous; the client's loop runs in a daemon thread so one step's requests
go out concurrently over one connection pool, and a caller may also hold a future while it
trains (`submit`). Each try must finish within `timeout_s` as a whole (connection to the
reply's last byte: httpx's own timeouts bound each wait, not the request), and its reply may
be at most `MAX_REPLY_BYTES` (`retrain.io.http.aread_capped`; a larger reply is final, not
retried). A request is retried on connection errors and timeouts, 429 and 5xx, with exponential
backoff (a server's Retry-After wins, up to 30 s); any other status is final. When the tries
run out the error names the URL, never the API key.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from retrain.errors import UserError
from retrain.io.http import ReplyTooLarge, aread_capped, too_large

T = TypeVar("T")
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
#: n completions of max_tokens with their logprobs fit well within it; an endless reply does not
MAX_REPLY_BYTES = 512 << 20
#: headers that describe the body as it came over the wire, not as it is decoded here
WIRE_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})


class InferenceServerError(UserError, RuntimeError):
    """The inference server did not answer usefully; the message names its URL."""


class HTTPStatusError(InferenceServerError):
    def __init__(self, message: str, status: int, body: str) -> None:
        super().__init__(message)
        self.status, self.body = status, body


@dataclass
class RetryPolicy:
    retries: int = 5
    base_s: float = 0.5
    max_s: float = 8.0

    def delay(self, attempt: int, retry_after: str | None, rng: random.Random) -> float:
        if retry_after:
            try:
                return min(max(float(retry_after), 0.0), 30.0)
            except ValueError:
                pass
        return min(self.base_s * 2 ** attempt, self.max_s) * (0.75 + 0.5 * rng.random())


class ServerClient:
    def __init__(self, url: str, *, api_key: str = "", timeout_s: float = 300.0, connect_timeout_s: float = 10.0,
                 retry: RetryPolicy | None = None, concurrency: int = 64, max_bytes: int = MAX_REPLY_BYTES) -> None:
        self.url = url.rstrip("/")
        self.deadline_s, self.max_bytes = timeout_s, max_bytes
        self.retry = retry or RetryPolicy()
        self.retries = 0  # retried requests since the last `take_retries`
        self._rng = random.Random(0x5EED)  # backoff jitter only; never the training RNG
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="retrain-inference-http", daemon=True)
        self._thread.start()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)

        async def make() -> httpx.AsyncClient:
            return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout, limits=limits)

        self._client = self.run(make())
        self._bound = self.run(_semaphore(concurrency))

    # -- the loop ----------------------------------------------------------------------------
    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.submit(coro).result()

    def close(self) -> None:
        if not self._loop.is_running():
            return
        try:
            self.run(self._client.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()

    # -- requests ----------------------------------------------------------------------------
    async def request(self, method: str, path: str, body: Any = None, *, what: str = "",
                      retry: bool = True) -> httpx.Response:
        """The response of the first try that is not retryable; raises after the last try."""
        attempts = 1 + (self.retry.retries if retry else 0)
        started = time.monotonic()
        last = ""
        async with self._bound:
            for attempt in range(attempts):
                retry_after = None
                try:
                    async with asyncio.timeout(self.deadline_s):
                        resp = await self._send(method, path, body)
                except ReplyTooLarge as exc:
                    raise InferenceServerError(f"inference server {self.url} {what or path}: {exc}") from None
                except (httpx.TimeoutException, TimeoutError) as exc:
                    last = (f"timed out ({type(exc).__name__})" if isinstance(exc, httpx.TimeoutException)
                            else f"no complete reply within {self.deadline_s:g} s")
                except httpx.TransportError as exc:
                    last = _transport_text(exc)
                else:
                    if resp.status_code < 400:
                        return resp
                    if resp.status_code not in RETRY_STATUS:
                        raise HTTPStatusError(
                            f"inference server {self.url}{path} answered {resp.status_code}: {_brief(resp.text)}",
                            resp.status_code, resp.text)
                    last = f"answered {resp.status_code}: {_brief(resp.text)}"
                    retry_after = resp.headers.get("retry-after")
                if attempt + 1 < attempts:
                    self.retries += 1
                    await asyncio.sleep(self.retry.delay(attempt, retry_after, self._rng))
        tries = f"{attempts} tries over {time.monotonic() - started:.1f} s" if attempts > 1 else "one try"
        raise InferenceServerError(f"inference server {self.url} {what or path} failed after {tries}: {last}")

    async def _send(self, method: str, path: str, body: Any) -> httpx.Response:
        """One try, its body read under the size cap into a response that holds it whole."""
        req = self._client.build_request(method, path, json=body)
        resp = await self._client.send(req, stream=True)
        try:
            declared = resp.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
                raise too_large(str(req.url), self.max_bytes, int(declared))
            content = await aread_capped(resp.aiter_bytes(), self.max_bytes, str(req.url))
        finally:
            await resp.aclose()
        headers = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in WIRE_HEADERS]
        return httpx.Response(resp.status_code, headers=headers, content=content, request=req)

    async def post_json(self, path: str, body: Any, *, what: str = "") -> Any:
        resp = await self.request("POST", path, body, what=what)
        return resp.json()

    def take_retries(self) -> int:
        n, self.retries = self.retries, 0
        return n


async def _semaphore(n: int) -> asyncio.Semaphore:
    return asyncio.Semaphore(n)


def _transport_text(exc: httpx.TransportError) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({text})"
    return f"{type(exc).__name__} ({text})"


def _brief(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


async def gather_all(calls: list[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run every call; if one fails, cancel the rest and raise its error."""
    tasks = [asyncio.ensure_future(c()) for c in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
