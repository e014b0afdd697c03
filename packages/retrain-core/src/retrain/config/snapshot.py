"""Resolved-config snapshots with secrets redacted (run_meta.json, manifests, explain --json)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from retrain.config.fields import flat_dict
from retrain.config.schema import TrainConfig

REDACTED = "<redacted>"
_SECRET_KEYS = frozenset({
    "access_key", "access_token", "api_key", "apikey", "authorization", "auth_token", "bearer_token",
    "credential", "credentials", "hf_token", "openai_api_key", "password", "passwd", "refresh_token",
    "secret", "auth", "key", "sig", "signature", "token",
})
_SECRET_SUFFIXES = ("_api_key", "_password", "_secret", "_token")


def is_secret_key(key: str) -> bool:
    k = key.strip().lower().replace("-", "_")
    return k in _SECRET_KEYS or k.endswith(_SECRET_SUFFIXES) or "credential" in k


def redact_url(text: str) -> str:
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    if not parts.scheme or not parts.netloc:
        return text
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, REDACTED if is_secret_key(k) else v) for k, v in pairs], safe="<>")
    fragment = REDACTED if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def sanitize(value: Any, key: str = "") -> Any:
    if key and is_secret_key(key) and value not in ("", None, [], {}):
        return REDACTED
    if isinstance(value, Mapping):
        return {str(k): sanitize(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize(v) for v in value]
    if isinstance(value, str) and "://" in value:
        return redact_url(value)
    return value


def config_snapshot(config: TrainConfig) -> dict[str, Any]:
    """{flat field: sanitised value} for every field (the reference's snapshot shape)."""
    out: dict[str, Any] = {}
    for flat, value in flat_dict(config).items():
        if flat == "trainer_command" and value:
            out[flat] = REDACTED  # an opaque shell line may embed anything
        else:
            out[flat] = sanitize(value, flat)
    return out


def sections_snapshot(config: TrainConfig) -> dict[str, dict[str, Any]]:
    """{section: {key: sanitised value}}, the TOML-shaped view."""
    import msgspec

    raw = msgspec.to_builtins(config)
    out: dict[str, dict[str, Any]] = {}
    for section, table in raw.items():
        out[section] = {}
        for key, value in table.items():
            if section == "training" and key == "trainer_command" and value:
                out[section][key] = REDACTED
            else:
                out[section][key] = sanitize(value, key)
    return out
