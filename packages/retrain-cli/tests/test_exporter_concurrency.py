import json
import threading
import time
import urllib.request

import pytest

from retrain.status.export.server import make_server, serve_in_thread

CLIENTS = 200
PATHS = ("/metrics", "/v1/runs", "/healthz")


@pytest.mark.timeout(120)
def test_exporter_answers_200_concurrent_requests(log_tree):
    server = make_server(log_tree, "127.0.0.1", 0, ttl=0.5)
    thread = serve_in_thread(server)
    barrier = threading.Barrier(CLIENTS)
    results = [None] * CLIENTS

    def client(i):
        path = PATHS[i % len(PATHS)]
        try:
            barrier.wait(timeout=30)
            with urllib.request.urlopen(server.url + path, timeout=30) as resp:
                results[i] = (resp.status, path, resp.read())
        except BaseException as exc:  # collected and asserted below
            results[i] = exc

    started = time.monotonic()
    try:
        clients = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for t in clients:
            t.start()
        for t in clients:
            t.join(60)
        elapsed = time.monotonic() - started
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)

    errors = [r for r in results if not isinstance(r, tuple)]
    assert errors == []
    assert all(status == 200 for status, _, _ in results)
    for _, path, body in results:
        if path == "/metrics":
            assert b"retrain_run_step{" in body
        else:
            assert json.loads(body)
    # Every request reused one of a handful of scans rather than rescanning per request.
    assert server.exporter.cache.scans <= 1 + elapsed / 0.5 + 1
    assert elapsed < 60
