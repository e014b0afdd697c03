"""`retrain doctor CONFIG` for backend = "tinker": the SDK version, whether the service answers,
and which base models it serves. Reached through the backend catalog (`BackendDefinition.probe`).

The question goes to the service from a child process: importing the SDK imports torch, which
`doctor` must not (it trains nothing), and the SDK's background event-loop thread lives until
the interpreter ends, where its teardown is outside retrain's hands (CI saw a doctor process
abort after it had printed its report). The child prints one JSON line; what it prints is the
answer, however it exits afterwards, and the key reaches it through its environment only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from retrain.backends.errors import BackendUnavailable
from retrain.config.schema import TrainConfig


def probe(config: TrainConfig, *, timeout_s: float = 10.0) -> dict[str, Any]:
    """{backend, service, sdk, answers, models, serves_model | error}; never raises, never
    holds the key."""
    from retrain.backends.tinker.runtime import KEY_ENV, URL_ENV, sdk_version, service

    out: dict[str, Any] = {"backend": "tinker", "sdk": sdk_version() or None, "answers": False}
    try:
        svc = service(config)
    except BackendUnavailable as exc:
        out["error"] = str(exc)
        return out
    out["service"] = svc.where
    env = {**os.environ, KEY_ENV: svc.key.value, URL_ENV: svc.url}
    try:
        child = subprocess.run([sys.executable, "-m", __name__, str(timeout_s)], env=env, capture_output=True,
                               text=True, timeout=timeout_s * 3 + 60, check=False)
    except subprocess.TimeoutExpired:
        out["error"] = f"the service did not answer within {timeout_s * 3 + 60:.0f} s"
        return out
    answer = _answer(child.stdout)
    if answer is None:
        out["error"] = svc.key.scrub(f"the probe process ended ({child.returncode}) without an answer: "
                                     f"{' '.join(child.stderr.split())[-300:]}")
        return out
    if "error" in answer:
        out["error"] = answer["error"]
        return out
    out["answers"] = True
    out["models"] = answer["models"]
    out["serves_model"] = config.model.model in out["models"] if out["models"] else None
    return out


def _answer(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and ("models" in found or "error" in found):
            return found
    return None


def _ask(timeout_s: float) -> dict[str, Any]:
    """In the child: the service named by the environment, asked through the SDK."""
    from retrain.backends.tinker.runtime import (
        KEY_ENV,
        URL_ENV,
        Secret,
        Service,
        load_tinker,
        served_models,
    )

    svc = Service(os.environ.get(URL_ENV, ""), Secret(os.environ.get(KEY_ENV, "")))
    try:
        return {"models": served_models(load_tinker(), svc, timeout_s=timeout_s)}
    except BackendUnavailable as exc:
        return {"error": str(exc)}


if __name__ == "__main__":
    print(json.dumps(_ask(float(sys.argv[1]))), flush=True)
