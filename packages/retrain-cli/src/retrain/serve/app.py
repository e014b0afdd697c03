"""The FastAPI application: OpenAI's completions (with vLLM's `prompt_logprobs`: the logprob of
every prompt token, what a distillation teacher answers), chat completions and models
endpoints, vLLM's LoRA adapter endpoints and token-in/token-out /inference/v1/generate (verifiers' TrainClient
renders prompts to ids and samples through it), /health and Prometheus /metrics.

Every answer that is not a success is OpenAI's error object with the offending field in
`param`: a bad body is 400 naming the field, an unknown model 404, a missing or wrong API key
401, a body over `MAX_BODY_BYTES` 413 (retrain.backends.body_limit). The API key is compared in
constant time and never written to a log or an error; an adapter path is accepted only under
the adapter root. The event loop only routes: text is tokenised and a chat template rendered
on a worker thread, and the model runs on the engine's own, so a long prompt never holds up
another request (`/health` included).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from retrain.backends import token_generate
from retrain.backends.body_limit import MAX_BODY_BYTES, BodyLimit
from retrain.backends.serving import UNAUTHORIZED, ServeError, ServeRequest, authorized
from retrain.serve.schema import (
    ChatRequest,
    CompletionRequest,
    LoadAdapter,
    Sampling,
    UnloadAdapter,
)
from retrain.types import SamplingParams

OPEN_PATHS = frozenset({"/health"})


def error(status: int, message: str, *, param: str | None = None, kind: str = "") -> JSONResponse:
    kinds = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError", 413: "RequestTooLarge",
             500: "InternalServerError"}
    return JSONResponse({"error": {"message": message, "type": kind or kinds.get(status, "Error"), "param": param,
                                   "code": status}}, status_code=status)


def _validation_error(exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0] if exc.errors() else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid":
        return error(400, "the request body is not valid JSON")
    if first.get("type") == "extra_forbidden":
        field = ".".join(loc)
        return error(400, f"unknown field {field!r} (retrain serve refuses what it would ignore)", param=field)
    field = ".".join(p for p in loc if not p.startswith(("list[", "str", "int", "function-")))
    top = loc[0] if loc else None
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    return error(400, f"{field or 'body'}: {msg}", param=top)


def create_app(engine: Any, *, api_key: str = "", adapter_root: Path | None = None,
               max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """`engine` takes `retrain.backends.serving.ServeRequest`s (the local backend's is
    `retrain.inference_engine.pytorch.serving.ServingEngine`)."""
    app = FastAPI(title="retrain serve", docs_url=None, redoc_url=None, openapi_url=None)
    root = adapter_root.resolve() if adapter_root is not None else None
    routes = _Routes(engine, root, key=api_key.encode(), started=int(time.time()))
    app.exception_handler(RequestValidationError)(_invalid)
    app.exception_handler(ServeError)(_refused)
    app.middleware("http")(routes.auth)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.get("/health")(health)
    app.get("/v1/models")(routes.models)
    app.get("/metrics")(routes.metrics)
    # SGLang's paths too, so retrain's sglang engine kind can be tested against this server
    for prefix in ("/v1", ""):
        app.post(f"{prefix}/load_lora_adapter")(routes.load)
        app.post(f"{prefix}/unload_lora_adapter")(routes.unload)
    app.post("/v1/completions", response_model=None)(routes.completions)
    app.post("/v1/chat/completions", response_model=None)(routes.chat)
    app.post(token_generate.PATH, response_model=None)(routes.generate)
    return app


async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
    return _validation_error(exc)


async def _refused(_: Request, exc: ServeError) -> JSONResponse:
    text = str(exc)
    return error(exc.status, f"{exc.param}: {text}" if exc.param and exc.param not in text else text,
                 param=exc.param)


async def health() -> Response:
    return Response(status_code=200)


def _sampling(body: Sampling, max_tokens: int) -> SamplingParams:
    top_k = body.top_k if body.top_k and body.top_k > 0 else 0
    return SamplingParams(max_tokens=max_tokens, temperature=body.temperature, top_p=body.top_p, top_k=top_k,
                          min_p=body.min_p)


def _serve_request(body: CompletionRequest | ChatRequest, prompts: list[list[int]], params: SamplingParams,
                   adapter: str | None, top_n: int) -> ServeRequest:
    return ServeRequest(prompts=prompts, n=body.n, params=params, adapter=adapter, seed=body.seed, top_n=top_n,
                        stop=body.stops, include_stop=body.include_stop_str_in_output,
                        skip_special_tokens=body.skip_special_tokens,
                        prompt_logprobs=getattr(body, "prompt_logprobs", None))


class _Routes:
    """The endpoints that read the engine; the API key guards every path but `OPEN_PATHS`."""

    def __init__(self, engine: Any, root: Path | None, *, key: bytes, started: int) -> None:
        self.engine, self.root, self.key, self.started = engine, root, key, started

    async def auth(self, request: Request, call_next: Any) -> Response:
        if self.key and request.url.path not in OPEN_PATHS and not authorized(
                request.headers.get("authorization", ""), self.key):
            return error(401, UNAUTHORIZED)
        response: Response = await call_next(request)
        return response

    async def models(self) -> dict[str, Any]:
        engine, started = self.engine, self.started
        data = [{"id": engine.model_name, "object": "model", "created": started, "owned_by": "retrain",
                 "root": engine.model_name, "parent": None, "max_model_len": engine.max_context or None}]
        data += [{"id": name, "object": "model", "created": started, "owned_by": "retrain", "root": path,
                  "parent": engine.model_name} for name, path in sorted(engine.adapters.items())]
        return {"object": "list", "data": data}

    async def metrics(self) -> PlainTextResponse:
        lines = []
        for name, value in self.engine.counters.as_dict().items():
            metric = f"retrain_serve_{name}" + ("" if name.endswith("_s") else "_total")
            lines += [f"# TYPE {metric} counter", f"{metric} {value}"]
        lines += ["# TYPE retrain_serve_adapters gauge", f"retrain_serve_adapters {len(self.engine.adapters)}"]
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    def _adapter_dir(self, path: str) -> str:
        if self.root is None:
            raise ServeError("loading adapters is off: start retrain serve with --adapter-root DIR", param="lora_path")
        resolved = Path(path).resolve()
        if not resolved.is_relative_to(self.root):
            raise ServeError(f"lora_path {path!r} is outside the adapter root", param="lora_path")
        return str(resolved)

    async def load(self, body: LoadAdapter) -> PlainTextResponse:
        if body.lora_name == self.engine.model_name:
            raise ServeError(f"{body.lora_name!r} is the base model's name", param="lora_name")
        await asyncio.wrap_future(self.engine.load_adapter(body.lora_name, self._adapter_dir(body.lora_path),
                                                           inplace=body.load_inplace))
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")

    async def unload(self, body: UnloadAdapter) -> PlainTextResponse:
        await asyncio.wrap_future(self.engine.unload_adapter(body.lora_name))
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")

    def _adapter_of(self, model: str) -> str | None:
        if model == self.engine.model_name:
            return None
        if model in self.engine.adapters:
            return model
        base, _, lora = model.partition(":")  # SGLang's "<base>:<adapter>"
        if base == self.engine.model_name and lora in self.engine.adapters:
            return lora
        raise ServeError(f"the model {model!r} does not exist", status=404, param="model")

    def _limit(self, requested: int | None, prompts: Sequence[Sequence[int]]) -> int:
        if requested is not None:
            return requested
        if self.engine.max_context:
            return max(1, self.engine.max_context - max(len(p) for p in prompts))
        return 16

    def _completion_prompts(self, p: str | list[int] | list[str] | list[list[int]]) -> list[list[int]]:
        if isinstance(p, str):
            return [self.engine.encode(p)]
        if all(isinstance(x, int) for x in p):
            return [[x for x in p if isinstance(x, int)]]
        return [self.engine.encode(x) if isinstance(x, str) else [int(i) for i in x] if isinstance(x, list) else []
                for x in p]

    async def completions(self, body: CompletionRequest) -> Any:
        adapter = self._adapter_of(body.model)
        prompts = await asyncio.to_thread(self._completion_prompts, body.prompt)
        top_n = body.logprobs or 0
        request = _serve_request(body, prompts, _sampling(body, self._limit(body.max_tokens, prompts)), adapter, top_n)
        view = _View(self.engine, body, chat=False, want_logprobs=body.logprobs is not None, top_n=top_n)
        return await self._respond(request, view, prompts)

    async def chat(self, body: ChatRequest) -> Any:
        adapter = self._adapter_of(body.model)
        prompts = [await asyncio.to_thread(self.engine.chat_prompt, [m.as_template() for m in body.messages])]
        limit = body.max_completion_tokens or body.max_tokens
        top_n = (body.top_logprobs or 0) if body.logprobs else 0
        request = _serve_request(body, prompts, _sampling(body, self._limit(limit, prompts)), adapter, top_n)
        view = _View(self.engine, body, chat=True, want_logprobs=body.logprobs, top_n=top_n)
        return await self._respond(request, view, prompts)

    async def generate(self, request: Request) -> Any:
        try:
            body = await request.json()
        except ValueError:
            return error(400, "the request body is not valid JSON")
        prompt = token_generate.prompt_of(body)
        adapter = self._adapter_of(token_generate.model_of(body, self.engine.model_name))
        base = SamplingParams(max_tokens=self._limit(None, [prompt]))
        params = token_generate.sampling_of(body.get("sampling_params"), base, getattr(self.engine, "eos_ids", ()))
        serve = ServeRequest(prompts=[prompt], n=1, params=params, adapter=adapter, seed=params.seed,
                             skip_special_tokens=False)
        (row,) = await asyncio.wrap_future(self.engine.submit(serve))
        return token_generate.answer(prompt, row.token_ids, row.logprobs, row.finish_reason)

    async def _respond(self, request: Any, view: _View, prompts: list[list[int]]) -> Any:
        prompt_tokens = sum(len(p) for p in prompts)
        if not view.body.stream:
            rows = await asyncio.wrap_future(self.engine.submit(request))
            return view.response(rows, prompts, prompt_tokens)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Any] = asyncio.Queue()
        request.on_token = lambda event: loop.call_soon_threadsafe(events.put_nowait, event)
        future = self.engine.submit(request)  # raises ServeError before the stream starts
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(events.put_nowait, None))
        return StreamingResponse(view.stream(events, future, prompt_tokens), media_type="text/event-stream")


class _View:
    """Renders served rows as one request's OpenAI response, or its server-sent events."""

    def __init__(self, engine: Any, body: Any, *, chat: bool, want_logprobs: bool, top_n: int) -> None:
        self.engine, self.body, self.chat = engine, body, chat
        self.want_logprobs, self.top_n = want_logprobs, top_n
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"

    def _token(self, token: int) -> str:
        if self.body.return_tokens_as_token_ids:
            return f"token_id:{token}"
        return str(self.engine.token_text(token))

    def _logprobs(self, ids: list[int], lps: list[float], top: list[list[tuple[int, float]]] | None,
                  start: int = 0) -> dict[str, Any] | None:
        if not self.want_logprobs:
            return None
        if self.chat:
            content = []
            for i, (t, lp) in enumerate(zip(ids, lps, strict=True)):
                alts = top[i] if top else []
                content.append({"token": self._token(t), "logprob": lp, "bytes": list(self._token(t).encode()),
                                "token_id": t,
                                "top_logprobs": [{"token": self._token(a), "logprob": v,
                                                  "bytes": list(self._token(a).encode())} for a, v in alts]})
            return {"content": content}
        offsets, at = [], start
        for t in ids:  # each token's own text: offsets of a streaming decode, not of re-decoded prefixes
            offsets.append(at)
            at += len(self.engine.decode([t], self.body.skip_special_tokens))
        tops = None
        if self.top_n and top:
            tops = [{self._token(a): v for a, v in alts} for alts in top]
        return {"tokens": [self._token(t) for t in ids], "token_logprobs": list(lps), "top_logprobs": tops,
                "text_offset": offsets}

    def _choice(self, index: int, text: str, ids: list[int], lps: list[float], top: Any, finish: str | None,
                *, delta: bool = False, first: bool = False) -> dict[str, Any]:
        if self.chat:
            message: dict[str, Any] = {"content": text}
            if not delta or first:
                message = {"role": "assistant", "content": text}
            elif finish is not None:
                message = {}
            choice: dict[str, Any] = {"index": index, ("delta" if delta else "message"): message,
                                      "logprobs": self._logprobs(ids, lps, top), "finish_reason": finish}
        else:
            choice = {"index": index, "text": text, "logprobs": self._logprobs(ids, lps, top),
                      "finish_reason": finish}
        choice["token_ids"] = ids
        return choice

    def _prompt_logprobs(self, scored: list[dict[int, tuple[float, int]] | None]) -> list[dict[str, Any] | None]:
        """vLLM's layout: per prompt position null (the first) or {token id: {logprob, rank, decoded_token}}."""
        return [None if entry is None else
                {str(t): {"logprob": lp, "rank": rank, "decoded_token": self.engine.decode([t], False)} for t, (lp, rank) in entry.items()}
                for entry in scored]

    def _usage(self, prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}

    def response(self, rows: list[Any], prompts: list[list[int]], prompt_tokens: int) -> dict[str, Any]:
        n = self.body.n
        choices = []
        for index, row in enumerate(rows):
            choice = self._choice(index, row.text, row.token_ids, row.logprobs, row.top, row.finish_reason)
            choice["prompt_token_ids"] = prompts[index // n]
            if row.prompt_logprobs is not None:
                choice["prompt_logprobs"] = self._prompt_logprobs(row.prompt_logprobs)
            choices.append(choice)
        return {"id": self.id, "object": self.object, "created": self.created, "model": self.body.model,
                "choices": choices, "usage": self._usage(prompt_tokens, sum(len(r.token_ids) for r in rows))}

    def _chunk(self, choices: list[dict[str, Any]], usage: dict[str, int] | None = None,
               last: bool = False) -> str:
        chunk: dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
                                 "created": self.created, "model": self.body.model, "choices": choices}
        if self.body.include_usage:
            chunk["usage"] = usage if last else None
        return f"data: {json.dumps(chunk)}\n\n"

    async def stream(self, events: asyncio.Queue[Any], future: Any, prompt_tokens: int) -> AsyncIterator[str]:
        started: set[int] = set()
        while True:
            event = await events.get()
            if event is None:
                break
            row, token, lp, alts, text = event
            first = self.chat and row not in started
            started.add(row)
            yield self._chunk([self._choice(row, text, [token], [lp], [alts] if alts else None, None,
                                            delta=True, first=first)])
        try:
            rows = future.result()
        except Exception as exc:
            message = str(exc) if hasattr(exc, "status") else "the model failed on this request"
            yield f"data: {json.dumps({'error': {'message': message, 'type': 'InternalServerError', 'code': 500}})}\n\n"
            yield "data: [DONE]\n\n"
            return
        for index, row in enumerate(rows):
            yield self._chunk([self._choice(index, "", [], [], None, row.finish_reason, delta=True,
                                            first=self.chat and index not in started)])
        if self.body.include_usage:
            yield self._chunk([], self._usage(prompt_tokens, sum(len(r.token_ids) for r in rows)), last=True)
        yield "data: [DONE]\n\n"
