"""A real HTTP server on 127.0.0.1 (the standard library's, in a thread) that misbehaves on
purpose, for the tests of retrain's HTTP clients (tests/faults/): each request is answered as
`mode` says.

- "ok": status `status` with `body`;
- "drip": the status and headers at once (with the body's Content-Length), then the body one
  byte every `drip_s`, padded with spaces to `DRIP_BYTES` (a minute at 0.2 s, whatever the
  machine's load: far from any deadline a test sets): each wait on the socket is short, the
  whole reply is not;
- "drip_head": the status line and headers themselves a byte every `drip_s`;
- "endless": 200 without a Content-Length, then bytes without end;
- "short": the body's Content-Length, then half the body and a closed connection;
- "huge": 200 declaring a Content-Length of 10 GB, then bytes without end;
- "redirect": 302 to `location`, unless the request is for `location`'s own path (a redirect
  to the same server), which is answered as "ok".

Every request's path and headers are recorded; a writer thread ends when its client hangs up.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

DRIP_BYTES = 300
CHAT_YES = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "yes"}}]}).encode()


class FaultyServer:
    def __init__(self, mode: str = "ok", *, body: bytes = CHAT_YES, status: int = 200, drip_s: float = 0.2,
                 location: str = "") -> None:
        self.mode, self.body, self.status, self.drip_s, self.location = mode, body, status, drip_s, location
        self.requests: list[tuple[str, str, dict[str, str]]] = []  # (method, path, headers)
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None: ...

            def do_GET(self) -> None:
                self._handle()

            def do_POST(self) -> None:
                self._handle()

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length", 0) or 0)
                if length:
                    self.rfile.read(length)
                with server.lock:
                    server.requests.append((self.command, self.path, dict(self.headers)))
                try:
                    server._answer(self)
                except OSError:  # the client hung up (its deadline, its size cap): this thread ends
                    pass
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True, name="faulty-http")
        self.thread.start()

    def _answer(self, h: Any) -> None:
        w = h.wfile
        if self.mode == "drip_head":
            head = (f"HTTP/1.1 200 OK\r\nContent-Length: {len(self.body)}\r\nX-Padding: "
                    + "x" * 400 + "\r\n\r\n").encode()
            for i in range(len(head)):
                w.write(head[i:i + 1])
                w.flush()
                time.sleep(self.drip_s)
            w.write(self.body)
            return
        if self.mode == "redirect" and h.path != urlsplit(self.location).path:
            h.send_response(302)
            h.send_header("Location", self.location)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        if self.mode in ("endless", "huge"):
            h.send_response(200)
            if self.mode == "huge":
                h.send_header("Content-Length", str(10 ** 10))
            h.send_header("Connection", "close")
            h.end_headers()
            block = b"x" * 65536
            while True:
                w.write(block)
        body = self.body.ljust(DRIP_BYTES) if self.mode == "drip" else self.body
        h.send_response(self.status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if self.mode == "short":
            w.write(body[: len(body) // 2])
            return
        if self.mode == "drip":
            for i in range(len(body)):
                w.write(body[i:i + 1])
                w.flush()
                time.sleep(self.drip_s)
            return
        w.write(body)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FaultyServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
