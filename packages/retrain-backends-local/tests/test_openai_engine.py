"""The OpenAI-compatible engine against a scripted HTTP server on 127.0.0.1: 429/503 bursts and
a slow server are retried within bounds, exhausted retries name the URL, a server that
refuses token-id prompts gets text (counted), token recovery follows the spec's order; and
the sampler-mismatch weights of truncated importance sampling."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import torch

from retrain.backends.local.mismatch import Mismatch
from retrain.inference_engine.openai.client import InferenceServerError
from retrain.inference_engine.openai.engine import OpenAIEngine, TextCodec
from retrain.inference_engine.openai.recover import recover
from retrain.types import SamplingParams

CODEC = TextCodec(prompt_text=lambda ids: "".join(chr(97 + i) for i in ids),
                  encode=lambda text: [ord(c) - 97 for c in text],
                  token_ids=lambda strings: [ord(s) - 97 if len(s) == 1 else None for s in strings])


class Script:
    """What the fake server answers to each POST /v1/completions, in order; then "ok"."""

    def __init__(self) -> None:
        self.plan: list[str] = []
        self.bodies: list[dict[str, Any]] = []


def choice(n: int) -> dict[str, Any]:
    return {"index": n, "text": "bc", "finish_reason": "length",
            "logprobs": {"tokens": ["token_id:1", "token_id:2"], "token_logprobs": [-0.5, -0.25]}}


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._send(200, {"data": [{"id": "m", "parent": None}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            script.bodies.append(body)
            if self.path != "/v1/completions":
                self._send(200, {})
                return
            step = script.plan.pop(0) if script.plan else "ok"
            if step == "slow":
                time.sleep(1.5)
            if step in ("429", "503"):
                self._send(int(step), {"error": "busy"}, {"retry-after": "0"} if step == "429" else None)
            elif step == "refuse_ids" and isinstance(body["prompt"], list):
                script.plan.insert(0, "ok")
                self._send(400, {"error": {"message": "prompt must be a string"}})
            else:
                self._send(200, {"choices": [choice(i) for i in range(body["n"])]})

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    httpd.shutdown()
    httpd.server_close()


def engine(url: str, kind: str = "vllm", **kw: Any) -> OpenAIEngine:
    e = OpenAIEngine(kind, url, CODEC, adapter_name="run", **{"retries": 3, "timeout_s": 0.5, **kw})
    e.client.retry.base_s = 0.01
    e.start()
    return e


def test_bursts_of_429_and_503_and_a_slow_server_are_retried(server: tuple[str, Script]) -> None:
    url, script = server
    e = engine(url)
    try:
        script.plan = ["503", "429", "slow"]
        out = e.generate([[0, 1]], 2, SamplingParams(max_tokens=2), seeds=[5])
        assert [c.token_ids for c in out[0]] == [[1, 2], [1, 2]] and out[0][0].logprobs == [-0.5, -0.25]
        m = e.metrics()
        assert m["engine_request_retries"] == 3 and m["engine_token_recovery_strings"] == 2
        body = script.bodies[-1]
        assert body["prompt"] == [0, 1] and body["n"] == 2 and body["seed"] == 5 and body["logprobs"] == 1
    finally:
        e.close()


def test_exhausted_retries_name_the_url(server: tuple[str, Script]) -> None:
    url, script = server
    e = engine(url, retries=2)
    try:
        script.plan = ["503"] * 3
        with pytest.raises(InferenceServerError, match=rf"{url} POST /v1/completions failed after 3 tries.*503"):
            e.generate([[0]], 1, SamplingParams(max_tokens=2))
    finally:
        e.close()


def test_a_server_that_refuses_token_ids_gets_text_counted(server: tuple[str, Script]) -> None:
    url, script = server
    e = engine(url)
    try:
        script.plan = ["refuse_ids"]
        e.generate([[2, 3]], 1, SamplingParams(max_tokens=2))
        assert script.bodies[-1]["prompt"] == "cd"
        m = e.metrics()
        assert m["engine_token_prompt_fallbacks"] == 1 and m["engine_token_native_prompt_enabled"] == 0
    finally:
        e.close()


def test_sglang_reload_unloads_then_loads(server: tuple[str, Script]) -> None:
    url, script = server
    e = engine(url, kind="sglang")
    try:
        assert e.model_for(None) == "m"  # no adapter yet: the base model
        e.reload("/a")
        e.reload("/b")
        paths = [b.get("lora_path") for b in script.bodies]  # an unload first, whatever the name held
        assert paths == [None, "/a", None, "/b"] and e.model_for(None) == "m:run-latest"
    finally:
        e.close()


def test_each_version_is_loaded_under_its_own_name_and_sampled_by_name(server: tuple[str, Script]) -> None:
    url, script = server
    e = engine(url)
    try:
        e.load_version(0, "/v0")
        e.load_version(1, "/v1")
        e.unload_version(0)
        e.unload_version(0)  # no longer loaded: nothing sent
        loads = [(b["lora_name"], b.get("lora_path"), b.get("load_inplace")) for b in script.bodies]
        # in place always: the name may be loaded already by a run killed before it unloaded
        assert loads == [("run-policy-v0", "/v0", True), ("run-policy-v1", "/v1", True), ("run-policy-v0", None, None)]
        assert e.versions == {1}
        e.load_version(1, "/v1b")  # a version published again is replaced in place
        assert script.bodies[-1] == {"lora_name": "run-policy-v1", "lora_path": "/v1b", "load_inplace": True}
        e.generate([[0]], 1, SamplingParams(max_tokens=2, policy_version=1))
        assert script.bodies[-1]["model"] == "run-policy-v1"
        assert e.metrics()["engine_adapter_reload_calls"] == 4
    finally:
        e.close()


def test_partial_rollouts_continue_on_the_newest_version_each_token_keeping_its_own(
        server: tuple[str, Script]) -> None:
    url, script = server
    e = engine(url, partial_tokens=2)
    try:
        e.load_version(1, "/v1")
        e.load_version(3, "/v3")  # published while version 1's batch samples
        script.bodies.clear()
        out = e.generate([[0]], 2, SamplingParams(max_tokens=6, policy_version=1), seeds=[7])
        assert [c.token_ids for c in out[0]] == [[1, 2, 1, 2, 1, 2]] * 2
        assert all(c.versions == [1, 1, 3, 3, 3, 3] and c.logprobs == [-0.5, -0.25] * 3 for c in out[0])
        first, *rest = script.bodies
        assert (first["model"], first["n"], first["max_tokens"], first["prompt"]) == ("run-policy-v1", 2, 2, [0])
        assert len(rest) == 4 and all(b["model"] == "run-policy-v3" and b["n"] == 1 and b["max_tokens"] == 2
                                      for b in rest)
        assert sorted(len(b["prompt"]) for b in rest) == [3, 3, 5, 5]  # the prompt and the tokens so far
        assert len({b["seed"] for b in script.bodies}) == 5  # each piece its own seed
        # without a version (evaluation) a completion is sampled whole
        script.bodies.clear()
        e.generate([[0]], 1, SamplingParams(max_tokens=6), seeds=[7])
        assert len(script.bodies) == 1 and script.bodies[0]["max_tokens"] == 6
    finally:
        e.close()


def test_unreachable_server_is_one_error_naming_the_url() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = OpenAIEngine("vllm", f"http://127.0.0.1:{port}", CODEC, adapter_name="run", retries=0)
    try:
        with pytest.raises(InferenceServerError, match=rf"127.0.0.1:{port} GET /v1/models failed after one try: cannot connect"):
            e.start()
    finally:
        e.close()


def test_recovery_order() -> None:
    kw = {"encode": CODEC.encode, "token_ids": CODEC.token_ids}
    content = {"logprobs": {"content": [{"token_id": 4, "logprob": -1.0}]}, "finish_reason": "stop"}
    assert recover(content, **kw).source == "content"
    ids = {"token_ids": [3, 4], "logprobs": {"token_logprobs": [-1.0, -2.0, -3.0]}, "text": "x"}
    got = recover(ids, **kw)
    assert got.source == "ids" and got.completion.token_ids == [3, 4] and got.completion.logprobs == [-1.0, -2.0]
    strings = {"text": "de", "logprobs": {"tokens": ["d", "e"], "token_logprobs": [-1.0, -2.0]}}
    assert recover(strings, **kw).completion.token_ids == [3, 4]
    unknown = {"text": "de", "logprobs": {"tokens": ["dd", "e"], "token_logprobs": [-1.0, -2.0]}}
    got = recover(unknown, **kw)
    assert got.source == "text" and got.completion.token_ids == [3, 4] and got.completion.logprobs == [-1.0, -2.0]
    bare = recover({"text": "ab", "finish_reason": "length"}, **kw)
    assert bare.source == "text" and bare.completion.logprobs == [0.0, 0.0] and bare.completion.finish_reason == "length"


def test_truncated_importance_sampling_weights_and_gap() -> None:
    new = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    sampler = torch.tensor([-1.0, -3.0, -0.4])
    off = Mismatch()
    anchor, weight = off.anchor(new, sampler)
    assert weight is None and anchor is sampler
    assert off.metrics()["engine/logprob_gap_max"] == pytest.approx(1.0)
    assert off.metrics()["engine/logprob_gap_mean"] == pytest.approx((0 + 1 + 0.1) / 3, abs=1e-6)
    on = Mismatch(correction=True, cap=2.0)
    anchor, weight = on.anchor(new, sampler)
    assert torch.equal(anchor, new.detach()) and weight is not None
    assert weight.tolist() == pytest.approx([1.0, 2.0, float(torch.tensor(-0.1).exp())])  # e^1 capped at 2
    assert on.metrics()["engine/is_truncated_fraction"] == pytest.approx(1 / 3, abs=1e-6)
