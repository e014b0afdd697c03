"""One OpenEnv session over the server's WebSocket (`<base>/ws`, openenv-core 0.3 messages).

`reset` sends `{"type": "reset", "data": kwargs}`, `step` sends `{"type": "step", "data":
action}` (the action object itself); both answer `{"type": "observation", "data":
{"observation", "reward", "done"}}`. A server error answers `{"type": "error", "data":
{"message", "code"}}` (`OpenEnvServerError`); `close` is sent without a reply. Connecting
waits `connect_timeout_s`, each reply `message_timeout_s`, each as a whole; a message larger
than `MAX_MESSAGE_BYTES` closes the session. A dropped connection, a timeout or an oversized
message raises `OpenEnvDropped`, which the episode runner retries in a new session. The two
plain HTTP requests (`/health`, `/schema`) go through `retrain.io.http.request`: a deadline
for the whole request and a size cap.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse, urlunparse

from retrain.io.http import HttpFailure, request

#: one observation (a rendered page or a screenshot included) fits; an endless one does not
MAX_MESSAGE_BYTES = 64 << 20
#: the action's JSON schema
MAX_SCHEMA_BYTES = 4 << 20


class OpenEnvServerError(RuntimeError):
    def __init__(self, message: str, code: str) -> None:
        self.code = code
        super().__init__(f"{code}: {message}")


class OpenEnvDropped(ConnectionError):
    """The session's connection closed, failed or timed out."""


def ws_url(base: str) -> str:
    u = urlparse(base.rstrip("/"))
    scheme = {"http": "ws", "https": "wss"}.get(u.scheme, u.scheme)
    path = u.path if u.path.endswith("/ws") else u.path + "/ws"
    return urlunparse((scheme, u.netloc, path, "", "", ""))


def http_url(base: str, path: str) -> str:
    u = urlparse(base.rstrip("/"))
    scheme = {"ws": "http", "wss": "https"}.get(u.scheme, u.scheme)
    root = u.path[:-3] if u.path.endswith("/ws") else u.path
    return urlunparse((scheme, u.netloc, root + path, "", "", ""))


def fetch_schema(base: str, timeout_s: float) -> dict[str, Any]:
    """GET <base>/schema: the action's JSON schema (and the observation's)."""
    url = http_url(base, "/schema")
    reply = request("GET", url, deadline_s=timeout_s, max_bytes=MAX_SCHEMA_BYTES)
    if reply.status != 200:
        raise RuntimeError(f"HTTP {reply.status} from {url}")
    body = json.loads(reply.body)
    if not isinstance(body, dict) or not isinstance(body.get("action"), dict):
        raise RuntimeError(f"{url} returned no action schema")
    return body


@dataclass
class StepResult:
    observation: Any
    reward: float | None
    done: bool


class OpenEnvSession:
    def __init__(self, base: str, *, connect_timeout_s: float, message_timeout_s: float) -> None:
        self.url = ws_url(base)
        self.connect_timeout_s = connect_timeout_s
        self.message_timeout_s = message_timeout_s
        self._ws: Any = None

    async def connect(self) -> None:
        import websockets

        try:
            self._ws = await asyncio.wait_for(
                websockets.connect(self.url, ping_interval=None, max_size=MAX_MESSAGE_BYTES),
                self.connect_timeout_s)
        except (OSError, TimeoutError, websockets.WebSocketException) as e:
            raise OpenEnvDropped(f"cannot connect to {self.url}: {e or type(e).__name__}") from e

    async def _rpc(self, message: dict[str, Any]) -> StepResult:
        import websockets

        if self._ws is None:
            raise OpenEnvDropped("not connected")
        try:
            await self._ws.send(json.dumps(message))
            raw = await asyncio.wait_for(self._ws.recv(), self.message_timeout_s)
        except TimeoutError as e:
            raise OpenEnvDropped(f"{self.url}: no reply to {message['type']} within {self.message_timeout_s:g} s") from e
        except (OSError, websockets.WebSocketException) as e:
            raise OpenEnvDropped(f"{self.url}: connection lost ({e or type(e).__name__})") from e
        reply = json.loads(raw)
        if not isinstance(reply, dict):
            raise RuntimeError(f"{self.url}: a reply that is not a JSON object: {raw!r:.200}")
        data = reply.get("data") or {}
        if reply.get("type") == "error":
            raise OpenEnvServerError(str(data.get("message", "")), str(data.get("code", "")))
        reward = data.get("reward")
        ok = isinstance(reward, int | float) and not isinstance(reward, bool)
        return StepResult(data.get("observation", {}), float(reward) if ok else None, bool(data.get("done", False)))

    async def reset(self, **kwargs: Any) -> StepResult:
        return await self._rpc({"type": "reset", "data": kwargs})

    async def step(self, action: dict[str, Any]) -> StepResult:
        return await self._rpc({"type": "step", "data": action})

    async def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is None:
            return
        try:
            await ws.send(json.dumps({"type": "close"}))
        except Exception:  # the session is gone either way
            pass
        try:
            await asyncio.wait_for(ws.close(), 2.0)
        except Exception:
            pass


def reachable(base: str, timeout_s: float) -> str:
    """'' when <base>/health answers, else why not (one phrase)."""
    url = http_url(base, "/health")
    try:
        reply = request("GET", url, deadline_s=timeout_s, max_bytes=MAX_SCHEMA_BYTES)
    except HttpFailure as e:
        return str(e)
    return "" if reply.status < 400 else f"HTTP {reply.status} from {url}"
