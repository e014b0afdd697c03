"""The status exporter (`retrain status --export`) gives each connection a whole-request
deadline: a client on 127.0.0.1 that drips its request a byte at a time (each wait shorter than
the per-read timeout) is cut at `Handler.deadline_s`, and the exporter keeps answering others."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import pytest

from retrain.status.export.server import Handler, make_server, serve_in_thread


def test_a_dripping_client_is_cut_at_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Handler, "deadline_s", 1.0)
    server = make_server(tmp_path, port=0)
    serve_in_thread(server)
    try:
        host, port = server.server_address[:2]
        with socket.create_connection((host, port), timeout=5) as slow:
            t0 = time.monotonic()
            cut = False
            for byte in b"GET /metrics HTTP/1.1\r\nX-Padding: " + b"x" * 300:
                try:
                    slow.sendall(bytes([byte]))
                except OSError:
                    cut = True
                    break
                slow.settimeout(0.2)
                try:
                    if slow.recv(1) == b"":
                        cut = True
                        break
                except TimeoutError:
                    pass
            took = time.monotonic() - t0
        assert cut and took < 10.0, f"the connection was {'cut' if cut else 'held'} after {took:.1f} s"
        with urllib.request.urlopen(server.url + "/healthz", timeout=10) as answer:
            assert answer.status == 200
    finally:
        server.shutdown()
        server.server_close()
