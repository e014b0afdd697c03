"""The run's policy behind vLLM's token-in/token-out endpoint, for a verifiers `vf.Env` to
sample from: `POST /inference/v1/generate` (prompt token ids in; sampled token ids, their
behaviour logprobs and the finish reason out) and `GET /v1/models`, served on 127.0.0.1 from
a thread while the run lives, answering 401 without the run's random API key.

verifiers' `TrainClient` (the client prime-rl trains with) renders each turn's prompt by
extending the previous turn's tokens, so every prompt this endpoint sees is exactly the
tokens the policy conditioned on. Requests that arrive together are sampled in one backend
call; each answer is remembered (prompt, completion) -> `Completion` so the trainer reads the
turn's logprobs, finish reason and entropies from what was served, not from the trace.

With `max_model_len` set (the model's context), `/v1/models` reports it, so the client refuses
an overlong prompt before sending it, and a completion is cut where the context ends (vLLM's
rule: `max_tokens` is clamped to the room left). A sampler that raises fails every request in
flight and every later one with 500, and keeps its exception in `Served.error` for the run to
raise: a broken model is the run's error, not a string of dropped episodes.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from retrain.backends import token_generate
from retrain.backends.body_limit import BodyLimit
from retrain.backends.serving import UNAUTHORIZED, ServeError, authorized
from retrain.types import Completion, SamplingParams

#: `(prompts, params) -> one completion per prompt`: the backend's sampler
Sampler = Callable[[list[list[int]], SamplingParams], list[Completion]]

MODEL = "policy"  # the one model name the endpoint serves
#: a backend call waits until no request has arrived for GATHER_S (at most GATHER_MAX_S), and
#: requests arriving while one runs go together into the next: a few ms against a model call
GATHER_S = 0.01
GATHER_MAX_S = 0.05


class SamplerFailed(RuntimeError):
    """The backend's sampler raised; `Served.error` holds what it raised."""


@dataclass
class _Pending:
    prompt: list[int]
    params: SamplingParams
    done: asyncio.Future[Completion]


@dataclass
class Served:
    """Every (prompt, completion) answered since `clear()`."""

    by_key: dict[tuple[tuple[int, ...], tuple[int, ...]], Completion] = field(default_factory=dict)
    calls: int = 0  # backend calls
    requests: int = 0
    sample_s: float = 0.0
    error: BaseException | None = None  # the sampler's first exception

    def clear(self) -> None:
        self.by_key.clear()
        self.calls = self.requests = 0
        self.sample_s = 0.0
        self.error = None


class PolicyEndpoint:
    def __init__(self, sampler: Sampler, *, stop_token_ids: Sequence[int], max_model_len: int = 0) -> None:
        self.sampler = sampler
        self.stop_token_ids = frozenset(int(t) for t in stop_token_ids)
        self.max_model_len = max_model_len
        self.api_key = secrets.token_urlsafe(24)
        self.base: SamplingParams | None = None  # the step's sampling (entropy, batch id), set per step
        self.served = Served()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._queue: asyncio.Queue[_Pending] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        import uvicorn

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self._app(), log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True,
                                        name="retrain-policy-endpoint")
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the policy endpoint for the verifiers environment did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    # sampling --------------------------------------------------------------------------------
    async def _batcher(self) -> None:
        assert self._queue is not None
        while True:
            batch = [await self._queue.get()]
            waited = 0.0
            while waited < GATHER_MAX_S:  # gather the requests in flight: each one waits for the others
                await asyncio.sleep(GATHER_S)
                waited += GATHER_S
                if self._queue.empty():
                    break
                while not self._queue.empty():
                    batch.append(self._queue.get_nowait())
            by_params: dict[SamplingParams, list[_Pending]] = {}
            for p in batch:
                by_params.setdefault(p.params, []).append(p)
            for params, items in by_params.items():
                t0 = time.perf_counter()
                try:
                    comps = await asyncio.to_thread(self.sampler, [p.prompt for p in items], params)
                except Exception as e:  # every waiting request fails; the run raises what the sampler did
                    self.served.error = self.served.error or e
                    for p in items:
                        if not p.done.done():
                            p.done.set_exception(SamplerFailed(type(e).__name__))
                    continue
                self.served.sample_s += time.perf_counter() - t0
                self.served.calls += 1
                for p, c in zip(items, comps, strict=True):
                    self.served.by_key[(tuple(p.prompt), tuple(c.token_ids))] = c
                    if not p.done.done():
                        p.done.set_result(c)

    async def generate(self, body: Any) -> dict[str, Any]:
        prompt = token_generate.prompt_of(body)
        if token_generate.model_of(body, MODEL) != MODEL:
            raise ServeError(f"model {body.get('model')!r}: this endpoint serves {MODEL!r}", param="model")
        params = token_generate.sampling_of(body.get("sampling_params"), self.base or SamplingParams(max_tokens=16),
                                            self.stop_token_ids)
        if self.max_model_len:
            room = self.max_model_len - len(prompt)
            if room < 1:
                raise ServeError(f"the prompt ({len(prompt)} tokens) fills the model's context of "
                                 f"{self.max_model_len} tokens", param="token_ids")
            if params.max_tokens > room:
                params = msgspec.structs.replace(params, max_tokens=room)
        if self.served.error is not None:
            raise SamplerFailed(type(self.served.error).__name__)
        if self._queue is None:
            self._queue = asyncio.Queue()
            asyncio.get_running_loop().create_task(self._batcher())
        done: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self.served.requests += 1
        await self._queue.put(_Pending(prompt, params, done))
        c = await done
        return token_generate.answer(prompt, c.token_ids, c.logprobs, c.finish_reason)

    def _app(self) -> FastAPI:
        app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
        app.add_middleware(BodyLimit)
        key = self.api_key.encode()

        def error(status: int, message: str) -> JSONResponse:
            return JSONResponse({"error": {"message": message, "code": status}}, status_code=status)

        @app.middleware("http")
        async def _auth(request: Request, call_next: Any) -> Response:
            if not authorized(request.headers.get("authorization", ""), key):
                return error(401, UNAUTHORIZED)
            response: Response = await call_next(request)
            return response

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "retrain",
                                                "max_model_len": self.max_model_len or None}]}

        @app.post(token_generate.PATH)
        async def generate(request: Request) -> Any:
            try:
                body = await request.json()
            except ValueError:
                return error(400, "the request body is not valid JSON")
            try:
                return await self.generate(body)
            except ServeError as e:
                return error(e.status, str(e))
            except SamplerFailed as e:
                return error(500, f"the policy's sampler failed ({e}); the run stops with its error")

        return app
