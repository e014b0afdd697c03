"""`retrain doctor CONFIG` for backend = "tinker": the SDK version, whether the service answers,
and which base models it serves. Reached through the backend catalog (`BackendDefinition.probe`)."""

from __future__ import annotations

from typing import Any

from retrain.backends.errors import BackendUnavailable
from retrain.config.schema import TrainConfig


def probe(config: TrainConfig, *, timeout_s: float = 10.0) -> dict[str, Any]:
    """{service, sdk, answers, models | error}; never raises, never holds the key."""
    from retrain.backends.tinker.runtime import load_tinker, sdk_version, served_models, service

    out: dict[str, Any] = {"backend": "tinker", "sdk": sdk_version() or None, "answers": False}
    try:
        sdk = load_tinker()
        svc = service(config)
        out["service"] = svc.where
        out["models"] = served_models(sdk, svc, timeout_s=timeout_s)
    except BackendUnavailable as exc:
        out["error"] = str(exc)
        return out
    out["answers"] = True
    out["serves_model"] = config.model.model in out["models"] if out["models"] else None
    return out
