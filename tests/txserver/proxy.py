"""A fault-injecting HTTP proxy on 127.0.0.1 in front of the Tinker test server.

Every request is forwarded to the server unchanged unless a fault applies:
- `too_many(path, n)`: the next n requests whose path ends with `path` are answered 429
  (with `Retry-After: 0`) without reaching the server;
- `delay_s`: every answer is held back that long (a slow service);
- `die_at(path, n)`: when the n-th request to `path` arrives the proxy stops at once: its
  socket closes and open connections drop, as when the server process is killed mid-step.
  `start()` brings it back on the same port.
It runs uvicorn in a thread of the test process.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from txserver.server import free_port

HOP = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive"})


@dataclass
class Faults:
    delay_s: float = 0.0
    throttled: dict[str, int] = field(default_factory=dict)  # path suffix -> 429s left
    death: tuple[str, int] | None = None  # (path suffix, n-th request)


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.port = free_port()
        self.faults = Faults()
        self.seen: Counter[str] = Counter()
        self.injected: Counter[str] = Counter()  # "429", "died"
        self.died_at = 0.0  # time.monotonic() of the death
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def too_many(self, path: str, n: int) -> None:
        self.faults.throttled[path] = n

    def die_at(self, path: str, n: int) -> None:
        self.faults.death = (path, n)

    # the ASGI app -----------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                pass
            await send({"type": "lifespan.shutdown.complete"})
            return
        path = scope["path"]
        self.seen[path] += 1
        if (death := self.faults.death) is not None and path.endswith(death[0]) and self.seen[path] >= death[1]:
            self.faults.death = None
            self.injected["died"] += 1
            self.died_at = time.monotonic()
            self.stop()
            await asyncio.sleep(3600)  # cancelled by the shutdown: the connection drops unanswered
            return
        for suffix, left in self.faults.throttled.items():
            if left > 0 and path.endswith(suffix):
                self.faults.throttled[suffix] = left - 1
                self.injected["429"] += 1
                await _answer(send, 429, [(b"retry-after", b"0"), (b"content-type", b"application/json")],
                              b'{"detail": "rate limited (fault proxy)"}')
                return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k.decode().lower() not in HOP]
        url = self.upstream + path + (f"?{scope['query_string'].decode()}" if scope["query_string"] else "")
        async with httpx.AsyncClient(timeout=None) as client:
            try:
                reply = await client.request(scope["method"], url, headers=headers, content=body)
            except httpx.HTTPError:
                await _answer(send, 502, [], b"")
                return
        if self.faults.delay_s:
            await asyncio.sleep(self.faults.delay_s)
        out = [(k.encode(), v.encode()) for k, v in reply.headers.items() if k.lower() not in HOP]
        await _answer(send, reply.status_code, out, reply.content)

    # lifecycle --------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        config = uvicorn.Config(self, host="127.0.0.1", port=self.port, log_level="critical", lifespan="off",
                                timeout_graceful_shutdown=0)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the fault proxy did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._server.force_exit = True

    def wait_stopped(self, timeout: float = 30) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
            assert not self._thread.is_alive(), "the fault proxy did not stop"


async def _answer(send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    with contextlib.suppress(Exception):
        await send({"type": "http.response.start", "status": status,
                    "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
