"""The exporter's HTTP server: a thread per request, three fixed routes, nothing else.

A request path is only ever compared with the route table, never joined to a file path, so
no request reaches the filesystem; the scan reads inside the log root only (confined scope).
A connection gets `Handler.deadline_s` as a whole (`retrain.io.http.shut_after`): a client that
drips its request a byte per wait cannot hold a thread for longer.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST

from retrain.io.http import shut_after
from retrain.status.export.prometheus import build_registry, metrics_body
from retrain.status.export.runs import health_body, runs_body
from retrain.status.export.scan import SnapshotCache

JSON_TYPE = "application/json; charset=utf-8"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class Exporter:
    """The routes: URL path -> (content type, body)."""

    def __init__(self, root: Path, ttl: float) -> None:
        self.cache = SnapshotCache(root, ttl)
        self.registry = build_registry(self.cache)
        self.routes: dict[str, Callable[[], tuple[str, bytes]]] = {
            "/metrics": lambda: (CONTENT_TYPE_LATEST, metrics_body(self.registry)),
            "/v1/runs": lambda: (JSON_TYPE, runs_body(self.cache.get())),
            "/healthz": lambda: (JSON_TYPE, health_body(self.cache.get())),
        }


class Handler(BaseHTTPRequestHandler):
    server: ExporterServer
    #: Seconds a client may take to send its request before the thread gives up on it.
    timeout = 10
    #: Seconds one connection may take as a whole, its request read and its answer written.
    deadline_s = 30.0
    server_version = "retrain-exporter"

    def handle(self) -> None:
        timer = shut_after(self.connection, self.deadline_s)
        try:
            super().handle()
        finally:
            timer.cancel()

    def do_GET(self) -> None:
        route = urlsplit(self.path).path.rstrip("/")
        handler = self.server.exporter.routes.get(route)
        if handler is None:
            self._send(404, "text/plain; charset=utf-8", b"not found\n")
            return
        try:
            content_type, body = handler()
        except Exception as exc:  # one bad scan must not take the server down
            self._send(500, "text/plain; charset=utf-8", f"scan failed: {type(exc).__name__}\n".encode())
            return
        self._send(200, content_type, body)

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class ExporterServer(ThreadingHTTPServer):
    daemon_threads = True
    #: Listen backlog: a scrape burst must queue, not be refused.
    request_queue_size = 512

    def __init__(self, address: tuple[str, int], exporter: Exporter) -> None:
        self.exporter = exporter
        super().__init__(address, Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = host if isinstance(host, str) else host.decode()
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


class ExporterServer6(ExporterServer):
    address_family = socket.AF_INET6


def make_server(root: Path, host: str = "127.0.0.1", port: int = 9108, ttl: float = 2.0) -> ExporterServer:
    cls = ExporterServer6 if ":" in host else ExporterServer
    return cls((host, port), Exporter(root, ttl))


def serve_in_thread(server: ExporterServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="retrain-exporter", daemon=True)
    thread.start()
    return thread
