"""`retrain doctor CONFIG`: does the config's inference server (or its backend's remote
service) answer, and what does it serve?"""

from __future__ import annotations

from typing import Any

from retrain.registry.builtin import INFERENCE_DEFAULT_URLS

#: a model list, however many adapters a server holds
MAX_REPLY_BYTES = 16 << 20


def probe_server(engine: str, url: str, *, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """None for the in-process engine; else {url, answers, models | error}. GET /v1/models
    once (the whole request within `timeout_s`, the reply at most `MAX_REPLY_BYTES`), with
    RETRAIN_INFERENCE_API_KEY when set; never raises."""
    if engine not in INFERENCE_DEFAULT_URLS:
        return None
    import json
    import os

    from retrain.io.http import HttpFailure, request

    base = (url or INFERENCE_DEFAULT_URLS[engine]).rstrip("/").removesuffix("/v1")
    key = os.environ.get("RETRAIN_INFERENCE_API_KEY", "")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    out: dict[str, Any] = {"engine": engine, "url": base, "answers": False}
    try:
        reply = request("GET", base + "/v1/models", headers=headers, deadline_s=timeout_s, max_bytes=MAX_REPLY_BYTES)
    except HttpFailure as exc:
        out["error"] = str(exc)
        return out
    if reply.status != 200:
        out["error"] = f"GET /v1/models answered {reply.status}"
        return out
    try:
        data = json.loads(reply.body).get("data", [])
    except (ValueError, AttributeError):
        out["error"] = "GET /v1/models did not answer a JSON object"
        return out
    out["answers"] = True
    out["models"] = [str(m.get("id")) for m in data if isinstance(m, dict)]
    return out


def server_line(probe: dict[str, Any]) -> str:
    if probe["answers"]:
        return f"Inference server ({probe['engine']}) {probe['url']}: answers; serves {', '.join(probe['models']) or 'nothing'}"
    return f"Inference server ({probe['engine']}) {probe['url']}: does not answer — {probe['error']}"


def probe_backend_service(config: Any) -> dict[str, Any] | None:
    """The config's backend's own probe (BackendDefinition.probe), reached through the
    catalog; None when the backend has nothing remote or is not installed here."""
    from retrain.backends import catalog
    from retrain.registry.core import load_target

    entry = catalog.lookup(config.backend.backend)
    if entry is None or not entry.installed or not entry.definition.probe:
        return None
    result: dict[str, Any] = load_target(entry.definition.probe, entry.name)(config)
    return result


def backend_service_line(probe: dict[str, Any]) -> str:
    head = f"{probe['backend']} service {probe.get('service', '')}".rstrip() + f" (SDK {probe.get('sdk') or 'missing'})"
    if not probe["answers"]:
        return f"{head}: does not answer — {probe['error']}"
    line = f"{head}: answers; serves {', '.join(probe['models']) or 'any model it is asked for'}"
    if probe.get("serves_model") is False:
        line += " — not this config's [model] model"
    return line
