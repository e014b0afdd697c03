"""An OpenEnv observation as the next user message (spec backends.md §8.3): by default its
JSON (keys sorted), prefixed on reset with the action schema the reply must match. A custom
renderer (`[environment] args.renderer`, a dotted path) is any callable `(observation,
**context)` returning a string; it receives the context keywords its signature names
(`context` = "reset" | "step", `action_schema`, `seed`)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

Renderer = Callable[..., Any]


def default_renderer(observation: Any, *, context: str, action_schema: dict[str, Any], **_: Any) -> str:
    body = json.dumps(observation, sort_keys=True, default=str)
    if context == "reset":
        schema = json.dumps(action_schema, sort_keys=True)
        return f"Respond with exactly one JSON object matching this action schema: {schema}\n{body}"
    return body


def render(renderer: Renderer, observation: Any, **context: Any) -> str:
    if hasattr(observation, "model_dump"):
        observation = observation.model_dump()
    params = inspect.signature(renderer).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        context = {k: v for k, v in context.items() if k in params}
    out = renderer(observation, **context)
    if not isinstance(out, str):
        raise TypeError(f"renderer {getattr(renderer, '__name__', renderer)!r} returned "
                        f"{type(out).__name__}, not a string")
    return out


def action_schema_for_prompt(schema: dict[str, Any]) -> dict[str, Any]:
    """The action schema without openenv's `metadata` field, which no action needs."""
    props = {k: v for k, v in (schema.get("properties") or {}).items() if k != "metadata"}
    return {**schema, "properties": props}
