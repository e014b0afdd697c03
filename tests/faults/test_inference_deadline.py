"""The OpenAI-compatible inference client (retrain.inference_engine.openai.client, what
`[inference] engine = "vllm" | "sglang" | "openai"` samples through) bounds each try as a whole
and caps its reply: a server on 127.0.0.1 that drips its reply is cut at `timeout_s` per try
(httpx's own timeouts bound only each wait), and a body past the cap fails at once, unretried."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from faulty_http import FaultyServer

from retrain.inference_engine.openai.client import (
    MAX_REPLY_BYTES,
    InferenceServerError,
    RetryPolicy,
    ServerClient,
)


@pytest.fixture
def client_of() -> Iterator[object]:
    made: list[ServerClient] = []

    def make(url: str, **kwargs: object) -> ServerClient:
        made.append(ServerClient(url, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for c in made:
        c.close()


def test_a_dripping_server_is_cut_at_the_deadline_of_each_try(client_of) -> None:  # type: ignore[no-untyped-def]
    with FaultyServer("drip", body=b'{"choices": []}' * 8, drip_s=0.2) as server:
        client = client_of(server.url, timeout_s=1.0, retry=RetryPolicy(retries=1, base_s=0.1, max_s=0.1))
        t0 = time.monotonic()
        with pytest.raises(InferenceServerError, match=r"failed after 2 tries .*no complete reply within 1 s"):
            client.run(client.request("POST", "/v1/completions", {"prompt": "a"}))
        took = time.monotonic() - t0
        assert len(server.requests) == 2
    assert took < 10.0, f"two tries of timeout_s = 1 took {took:.1f} s"


@pytest.mark.parametrize("mode", ["endless", "huge"])
def test_a_reply_past_the_cap_fails_at_once_and_is_not_retried(client_of, mode: str) -> None:  # type: ignore[no-untyped-def]
    with FaultyServer(mode) as server:
        client = client_of(server.url, timeout_s=30.0, max_bytes=1 << 20)
        t0 = time.monotonic()
        with pytest.raises(InferenceServerError, match=r"larger than 1 MiB"):
            client.run(client.request("POST", "/v1/completions", {"prompt": "a"}))
        assert time.monotonic() - t0 < 10 and len(server.requests) == 1


def test_the_default_cap_refuses_a_declared_10_gb_reply(client_of) -> None:  # type: ignore[no-untyped-def]
    with FaultyServer("huge") as server:
        client = client_of(server.url)
        with pytest.raises(InferenceServerError, match=f"larger than {MAX_REPLY_BYTES >> 20} MiB"):
            client.run(client.request("GET", "/v1/models"))


def test_a_good_reply_reads_whole(client_of) -> None:  # type: ignore[no-untyped-def]
    with FaultyServer("ok", body=b'{"data": [{"id": "m"}]}') as server:
        client = client_of(server.url, timeout_s=5.0)
        resp = client.run(client.request("GET", "/v1/models"))
    assert resp.status_code == 200 and resp.json() == {"data": [{"id": "m"}]}
