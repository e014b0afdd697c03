"""`retrain serve` answers every bad request with a 4xx naming the field, never a 500 with a
traceback in its log; caps the request body (413); and keeps its event loop free, so a long
prompt being tokenised does not hold up `/health`. The app runs in this process, on the tiny
model's real serving engine, behind uvicorn on 127.0.0.1 (a thread)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest

from retrain.backends.body_limit import MAX_BODY_BYTES
from retrain.config.schema import TrainConfig

BIG = 2 ** 70
COMPLETION = {"model": "tiny", "prompt": "1+1=", "max_tokens": 2}
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
GENERATE = {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2}}


class Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Errors]]:
    import torch
    import uvicorn

    from retrain.inference_engine.pytorch.serving import create
    from retrain.serve.app import create_app

    torch.set_num_threads(1)
    c = TrainConfig()
    c = msgspec.structs.replace(c, model=msgspec.structs.replace(c.model, model="tiny"),
                                backend=msgspec.structs.replace(c.backend, devices="cpu"))
    engine = create(c)
    errors = Errors()
    for name in ("uvicorn.error", "uvicorn", "fastapi"):
        logging.getLogger(name).addHandler(errors)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(engine), log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", errors
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        engine.close()
        sock.close()
        for name in ("uvicorn.error", "uvicorn", "fastapi"):
            logging.getLogger(name).removeHandler(errors)


def with_field(base: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    body = {**base, "sampling_params": dict(base["sampling_params"])} if "sampling_params" in base else dict(base)
    (body["sampling_params"] if key.startswith("sampling_params.") else body)[key.split(".")[-1]] = value
    return body


BAD = [
    ("/v1/completions", COMPLETION, "seed", BIG),
    ("/v1/chat/completions", CHAT, "seed", BIG),
    ("/v1/completions", COMPLETION, "temperature", True),
    ("/v1/completions", COMPLETION, "max_tokens", BIG),
    ("/inference/v1/generate", GENERATE, "sampling_params.seed", BIG),
    ("/inference/v1/generate", GENERATE, "sampling_params.seed", 1.5),
    ("/inference/v1/generate", GENERATE, "sampling_params.top_p", 0),
    ("/inference/v1/generate", GENERATE, "sampling_params.top_p", 5),
    ("/inference/v1/generate", GENERATE, "sampling_params.min_p", 5),
    ("/inference/v1/generate", GENERATE, "sampling_params.temperature", float("nan")),
    ("/inference/v1/generate", GENERATE, "sampling_params.max_tokens", float("inf")),
    ("/inference/v1/generate", GENERATE, "sampling_params.top_k", -2),
    ("/inference/v1/generate", GENERATE, "sampling_params.stop_token_ids", 5),
    ("/inference/v1/generate", GENERATE, "sampling_params.stop_token_ids", [True]),
    ("/inference/v1/generate", GENERATE, "sampling_params.skip_special_tokens", "no"),
    ("/inference/v1/generate", GENERATE, "model", 5),
    ("/inference/v1/generate", GENERATE, "priority", "high"),
]


@pytest.mark.parametrize(("path", "base", "key", "value"), BAD, ids=[f"{p}:{k}={v!r}" for p, _, k, v in BAD])
def test_a_bad_field_is_a_400_naming_it(served: tuple[str, Errors], path: str, base: dict[str, Any], key: str,
                                        value: Any) -> None:
    import json

    url, errors = served
    before = len(errors.records)
    # json.dumps writes NaN and Infinity as Python's json module reads them (as Starlette does)
    r = httpx.post(url + path, content=json.dumps(with_field(base, key, value)),
                   headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] in (key, key.split(".")[-1], key.split(".")[0]) and key.split(".")[-1] in error["message"]
    assert errors.records[before:] == []


def test_a_body_over_the_cap_is_a_413_declared_or_not(served: tuple[str, Errors]) -> None:
    url, errors = served
    before = len(errors.records)
    big = b'{"model": "tiny", "prompt": "' + b"x" * MAX_BODY_BYTES + b'"}'
    r = httpx.post(url + "/v1/completions", content=big, headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 413 and "larger than" in r.json()["error"]["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked, counted as it arrives
        yield big[: 1 << 20]
        yield big[1 << 20:]

    r = httpx.post(url + "/v1/completions", content=chunks(), headers={"content-type": "application/json"},
                   timeout=60)
    assert r.status_code == 413
    assert httpx.get(url + "/health", timeout=10).status_code == 200
    assert errors.records[before:] == []


def test_a_long_prompt_is_tokenised_off_the_event_loop(served: tuple[str, Errors]) -> None:
    url, _ = served
    prompt = "1+2=3. " * (1_500_000 // 7)  # 1.5 MB of text: seconds of tokenising (5 MB held /health 8.5 s)
    answer: dict[str, Any] = {}

    def ask() -> None:
        answer["r"] = httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 2},
                                 timeout=300)
        answer["done"] = time.monotonic()

    asking = threading.Thread(target=ask)
    t0 = time.monotonic()
    asking.start()
    time.sleep(0.5)  # the body is in and being tokenised
    waits = []
    for _ in range(3):
        h0 = time.monotonic()
        assert httpx.get(url + "/health", timeout=60).status_code == 200
        waits.append(time.monotonic() - h0)
    asked = time.monotonic()
    asking.join(timeout=300)
    assert answer["r"].status_code == 400 and "context" in answer["r"].json()["error"]["message"]
    took = answer["done"] - t0
    assert took > 1.0, f"the prompt was tokenised in {took:.2f} s: too quick to show anything"
    # /health answered while the prompt was still being tokenised, each time without waiting for it
    assert asked < answer["done"] and max(waits) < (took - 0.5) / 3, (took, waits)
