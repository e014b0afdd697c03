"""skyrl-tx 0.3.0's Tinker API server, bridged to the wire protocol of the tinker SDK 0.38.

Runs in the server's own virtual environment (scripts/ci/install-tinker-server.sh), always on
loopback. skyrl-tx predates the SDK it is driven by here; an ASGI layer in front of its app
closes the gaps (shared/spec/probes/tinker-server.md):

- `POST client/config`: the SDK fetches its settings first and treats 404 as fatal: `{}`
  (the SDK's defaults).
- `POST forward_backward` arrives as protobuf (optionally zstd-compressed; `forward_only`
  marks a forward): decoded into skyrl-tx's JSON `forward_backward` / `forward` requests.
- `POST retrieve_future` with `Accept: application/x-protobuf`: the SDK reads forward and
  sample results only as protobuf: skyrl-tx's JSON results are encoded.
- `POST asample`: the SDK requires one `sample_sequence_ids` entry per sample in the promise.
- `GET samplers/{id}` (creating a sampling client from a path) and
  `POST sessions/{id}/finish` (closing the client): answered here.
- The engine subprocess is started as engine.py (Tinker's loss reduction, no torch) with this
  interpreter, instead of `uv run`.

Usage: python api.py --host 127.0.0.1 --port N --base-model DIR [skyrl-tx EngineConfig flags]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import standins  # noqa: E402

standins.install()

import numpy as np  # noqa: E402
import uvicorn  # noqa: E402
import zstandard  # noqa: E402
from tinker.proto import tinker_public_pb2 as pb  # noqa: E402
from tx.tinker import api as tx_api  # noqa: E402
from tx.tinker.config import EngineConfig, add_model  # noqa: E402

PROTO = "application/x-protobuf"
PREFIX = "/api/v1/"
Scope = dict[str, Any]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]

_DTYPES = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}


# -- protobuf <-> skyrl-tx JSON ---------------------------------------------------------------
def _tensor_values(t: Any) -> list[float] | list[int]:
    if t.WhichOneof("encoding") != "dense":
        raise ValueError("only dense loss_fn_inputs are bridged")
    values: list[float] | list[int] = np.frombuffer(t.dense, dtype=_DTYPES[t.dtype]).tolist()
    return values


def _datum(d: Any) -> dict[str, Any]:
    chunks = []
    for chunk in d.model_input:
        if chunk.WhichOneof("chunk") != "encoded_text":
            raise ValueError("only encoded-text model inputs are bridged")
        chunks.append({"tokens": np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist()})
    inputs = {name: {"data": _tensor_values(t)} for name, t in d.loss_fn_inputs.items()}
    return {"model_input": {"chunks": chunks}, "loss_fn_inputs": inputs}


def forward_request(body: bytes, encoding: str) -> tuple[str, dict[str, Any]]:
    """(skyrl-tx route, JSON body) of a protobuf ForwardBackwardRequest."""
    if encoding == "zstd":
        body = zstandard.ZstdDecompressor().decompress(body, max_output_size=1 << 31)
    msg = pb.ForwardBackwardRequest.FromString(body)
    config = {k: float(v) for k, v in msg.loss_fn_config.items()}
    config.update({k: v.number for k, v in msg.loss_fn_config_v2.items() if v.WhichOneof("value") == "number"})
    inner = {"data": [_datum(d) for d in msg.data], "loss_fn": msg.loss_fn, "loss_fn_config": config or None}
    if msg.forward_only:
        return "forward", {"model_id": msg.model_id, "forward_input": inner}
    return "forward_backward", {"model_id": msg.model_id, "forward_backward_input": inner}


def forward_output(result: dict[str, Any]) -> bytes:
    """skyrl-tx's JSON ForwardBackwardOutput as protobuf: one ArrayRecord, each field's
    per-datum arrays concatenated with int64 byte offsets (num_datums + 1 of them)."""
    out = pb.ForwardBackwardOutput(loss_fn_output_type=result.get("loss_fn_output_type") or "ArrayRecord")
    for key, value in (result.get("metrics") or {}).items():
        if isinstance(value, int | float):
            out.metrics[key] = float(value)
    rows = result.get("loss_fn_outputs") or []
    if rows:
        record = out.loss_fn_outputs.add(num_datums=len(rows))
        for name in rows[0]:
            kind = np.int64 if rows[0][name].get("dtype") == "int64" else np.float32
            arrays = [np.asarray(r[name]["data"], dtype=kind).ravel() for r in rows]
            field = record.fields[name]
            field.dtype = pb.DTYPE_INT64 if kind is np.int64 else pb.DTYPE_FLOAT32
            field.data = b"".join(a.tobytes() for a in arrays)
            field.offsets = np.cumsum([0] + [a.nbytes for a in arrays], dtype=np.int64).tobytes()
    return bytes(out.SerializeToString())


def sample_output(result: dict[str, Any]) -> bytes:
    out = pb.SampleResponse()
    for s in result.get("sequences") or []:
        seq = out.sequences.add(stop_reason=pb.STOP_REASON_STOP if s.get("stop_reason") == "stop"
                                else pb.STOP_REASON_LENGTH)
        seq.tokens = np.asarray(s.get("tokens") or [], dtype=np.int32).tobytes()
        if s.get("logprobs") is not None:
            seq.logprobs = np.asarray(s["logprobs"], dtype=np.float32).tobytes()
    if result.get("prompt_logprobs"):
        lp = [np.nan if x is None else x for x in result["prompt_logprobs"]]
        out.prompt_logprobs = np.asarray(lp, dtype=np.float32).tobytes()
    return bytes(out.SerializeToString())


# -- the ASGI layer ---------------------------------------------------------------------------
async def _body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


async def _respond(send: Send, status: int, body: bytes, content_type: str = "application/json") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Bridge:
    def __init__(self, app: Any, base_model: str) -> None:
        self.app = app
        self.base_model = base_model

    async def inner(self, scope: Scope, route: str, body: bytes) -> tuple[int, list[Any], bytes]:
        """Call skyrl-tx's app with a JSON body on `route`; collect its response."""
        path = PREFIX + route
        headers = [(k, v) for k, v in scope["headers"]
                   if k.lower() not in (b"content-type", b"content-length", b"content-encoding", b"accept")]
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        sub = {**scope, "path": path, "raw_path": path.encode(), "headers": headers}
        sent = False
        result: dict[str, Any] = {"status": 500, "headers": [], "body": []}

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def collect(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                result["status"], result["headers"] = message["status"], message.get("headers", [])
            elif message["type"] == "http.response.body":
                result["body"].append(message.get("body", b""))

        await self.app(sub, receive, collect)
        return result["status"], result["headers"], b"".join(result["body"])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope.get("path", ""), scope.get("method", "")
        if scope["type"] != "http" or not path.startswith(PREFIX):
            return await self.app(scope, receive, send)
        route = path[len(PREFIX):]
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if method == "POST" and route == "client/config":
            await _body(receive)
            return await _respond(send, 200, b"{}")
        if method == "POST" and route.startswith("sessions/") and route.endswith("/finish"):
            await _body(receive)
            return await _respond(send, 200, b"null")
        if method == "GET" and route.startswith("samplers/"):
            answer = {"sampler_id": route.split("/", 1)[1], "base_model": self.base_model}
            return await _respond(send, 200, json.dumps(answer).encode())
        if method == "POST" and route == "forward_backward" and PROTO in headers.get("content-type", ""):
            target, request = forward_request(await _body(receive), headers.get("content-encoding", ""))
            status, out_headers, body = await self.inner(scope, target, json.dumps(request).encode())
            return await self._relay(send, status, out_headers, body)
        if method == "POST" and route == "asample":
            request_body = await _body(receive)
            status, out_headers, body = await self.inner(scope, route, request_body)
            if status == 200:
                promise = json.loads(body)
                n = int(json.loads(request_body).get("num_samples", 1))
                promise["sample_sequence_ids"] = [f"{promise['request_id']}:{i}" for i in range(n)]
                return await _respond(send, 200, json.dumps(promise).encode())
            return await self._relay(send, status, out_headers, body)
        if method == "POST" and route == "retrieve_future" and PROTO in headers.get("accept", ""):
            status, out_headers, body = await self.inner(scope, route, await _body(receive))
            if status == 200:
                result = json.loads(body)
                if isinstance(result, dict) and "loss_fn_outputs" in result:
                    return await _respond(send, 200, forward_output(result), PROTO)
                if isinstance(result, dict) and "sequences" in result:
                    return await _respond(send, 200, sample_output(result), PROTO)
            return await self._relay(send, status, out_headers, body)
        return await self.app(scope, receive, send)

    @staticmethod
    async def _relay(send: Send, status: int, headers: list[Any], body: bytes) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _engine_here() -> None:
    """Start the engine subprocess as engine.py under this interpreter (the API spawns
    `uv run --extra tinker --extra jax -m tx.tinker.engine ARGS`)."""
    spawn = asyncio.create_subprocess_exec

    async def create_subprocess_exec(*cmd: str, **kwargs: Any) -> Any:
        if "tx.tinker.engine" in cmd:
            args = cmd[cmd.index("tx.tinker.engine") + 1:]
            cmd = (sys.executable, str(HERE / "engine.py"), *args)
        return await spawn(*cmd, **kwargs)

    asyncio.create_subprocess_exec = create_subprocess_exec  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model(parser, EngineConfig)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    config = EngineConfig.model_validate({k: v for k, v in vars(args).items() if k in EngineConfig.model_fields})
    tx_api.app.state.engine_config = config
    _engine_here()
    uvicorn.run(Bridge(tx_api.app, config.base_model), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
