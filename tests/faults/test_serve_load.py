"""`retrain serve` under a burst: 50 requests at once each get their own completion (200, at most
the tokens asked for, an id of its own), none is dropped, and /health answers amid them. Its API
key and adapter-root checks are tests/test_serve.py's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serving import Served, start_server

pytestmark = pytest.mark.slow
KEY = "burst-test-key"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = start_server(tmp_path_factory.mktemp("serve-burst"), api_key=KEY)
    try:
        yield served
    finally:
        served.stop()


def test_fifty_requests_at_once_are_all_answered_and_health_stays_free(server: Served) -> None:
    answers: dict[int, Any] = {}
    gate = threading.Barrier(50)

    def ask(i: int) -> None:
        gate.wait()
        r = httpx.post(server.url + "/v1/completions", headers=server.headers, timeout=600,
                       json={"model": "tiny", "prompt": f"{i} + {i} =", "max_tokens": 4, "seed": i})
        answers[i] = (r.status_code, r.json())

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    health = httpx.get(server.url + "/health", timeout=60)
    for t in threads:
        t.join(timeout=600)
    assert health.status_code == 200
    assert sorted(answers) == list(range(50))
    for status, body in answers.values():
        assert status == 200, body
        (choice,) = body["choices"]
        assert 1 <= body["usage"]["completion_tokens"] <= 4 and choice["finish_reason"] in ("length", "stop"), body
    assert len({body["id"] for _, body in answers.values()}) == 50
