"""A completion's text to an OpenEnv action, against the action's JSON schema (spec
backends.md §8.3): strip whitespace and one surrounding ``` fence; a JSON object is the
action; otherwise, when the schema has exactly one required string field (or one string
property), the text fills that field; anything else is malformed."""

from __future__ import annotations

import json
from typing import Any


class ActionParseError(ValueError):
    pass


def text_field(schema: dict[str, Any]) -> str | None:
    """The one string field free text fills, or None."""
    props = {k: v for k, v in (schema.get("properties") or {}).items() if k != "metadata"}
    strings = [k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"]
    required = [k for k in schema.get("required") or [] if k in props]
    if len(required) == 1 and required[0] in strings:
        return required[0]
    if not required and len(props) == 1 and len(strings) == 1:
        return strings[0]
    return None


def parse_action(text: str, schema: dict[str, Any]) -> dict[str, Any]:
    body = text.strip()
    if body.startswith("```"):
        lines = body.splitlines()
        body = "\n".join(lines[1:-1] if len(lines) > 1 and lines[-1].strip().startswith("```") else lines[1:])
        body = body.strip()
    try:
        value = json.loads(body)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value
    field = text_field(schema)
    if field is not None:
        return {field: body}
    raise ActionParseError("not a JSON object matching the action schema")


def corrective_message(schema: dict[str, Any], detail: str = "") -> str:
    text = ("Your last message was not a valid action. Respond with exactly one JSON object matching this "
            f"action schema: {json.dumps(schema, sort_keys=True)}")
    return f"{text}\nServer detail: {detail}" if detail else text
