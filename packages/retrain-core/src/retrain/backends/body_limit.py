"""A cap on the request bodies a retrain server reads (`retrain serve`, the verifiers policy
endpoint): an ASGI middleware, in core because it needs no web framework.

A request that declares a Content-Length over the cap is answered 413 before its body is read;
one that sends more than the cap without declaring it is answered 413 as the excess arrives,
and the application sees the client gone (`http.disconnect`), so it stops reading and nothing
it does after that reaches the client or the server's log.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

#: a long prompt as text, or as token ids, fits many times over
MAX_BODY_BYTES = 16 << 20


class BodyLimit:
    def __init__(self, app: App, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send, declared)
            return
        refused, started, received = False, False, 0

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        async def limited() -> Message:
            nonlocal refused, received
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes and not started:
                    await self._refuse(send, None)
                    refused = True
                    return {"type": "http.disconnect"}
            return message

        try:
            await self.app(scope, limited, guarded_send)
        except Exception:
            if not refused:  # the application's own failure; a refused request's is its reading stopped
                raise

    async def _refuse(self, send: Send, declared: int | None) -> None:
        said = f" (it declares {declared})" if declared is not None else ""
        body = json.dumps({"error": {"message": f"the request body is larger than {self.max_bytes} bytes{said}",
                                     "type": "RequestTooLarge", "param": None, "code": 413}}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
