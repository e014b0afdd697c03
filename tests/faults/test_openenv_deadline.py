"""The OpenEnv client (retrain.environments.openenv.client) bounds what it reads: its plain
HTTP requests (`/health`, `/schema`) finish within their deadline as a whole against a server on
127.0.0.1 that drips its reply, and refuse a reply past the cap; a WebSocket message larger than
`MAX_MESSAGE_BYTES` drops the session (OpenEnvDropped, which the episode runner retries) instead
of being read whole."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from faulty_http import FaultyServer

from retrain.environments.openenv import client
from retrain.environments.openenv.client import (
    OpenEnvDropped,
    OpenEnvSession,
    fetch_schema,
    reachable,
)
from retrain.io.http import DeadlineExceeded, ReplyTooLarge


def test_a_dripping_schema_fails_at_the_deadline() -> None:
    schema = json.dumps({"action": {"type": "object"}}).encode()
    with FaultyServer("drip", body=schema, drip_s=0.2) as server:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="within 1 s"):
            fetch_schema(server.url, 1.0)
        assert time.monotonic() - t0 < 10.0
        why = reachable(server.url, 1.0)
    assert "within 1 s" in why


def test_an_endless_schema_is_refused() -> None:
    with FaultyServer("endless") as server, pytest.raises(ReplyTooLarge, match="larger than 4 MiB"):
        fetch_schema(server.url, 30.0)


def test_a_good_schema_and_health() -> None:
    schema = {"action": {"type": "object"}, "observation": {}}
    with FaultyServer("ok", body=json.dumps(schema).encode()) as server:
        assert fetch_schema(server.url, 5.0) == schema and reachable(server.url, 5.0) == ""
    with FaultyServer("ok", status=503, body=b"{}") as server:
        assert reachable(server.url, 5.0) == f"HTTP 503 from {server.url}/health"


def test_an_oversized_message_drops_the_session(monkeypatch: pytest.MonkeyPatch) -> None:
    import websockets

    monkeypatch.setattr(client, "MAX_MESSAGE_BYTES", 1 << 16)

    async def game(ws: websockets.ServerConnection) -> None:
        await ws.recv()
        await ws.send(json.dumps({"type": "observation", "data": {"observation": "x" * (1 << 17), "done": False}}))
        await ws.wait_closed()

    async def scenario() -> str:
        async with websockets.serve(game, "127.0.0.1", 0, max_size=None) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            session = OpenEnvSession(f"http://127.0.0.1:{port}", connect_timeout_s=5, message_timeout_s=5)
            await session.connect()
            try:
                with pytest.raises(OpenEnvDropped) as dropped:
                    await session.reset(seed=0)
                return str(dropped.value)
            finally:
                await session.close()

    message = asyncio.run(scenario())
    assert "connection lost" in message and "1009" in message, message
