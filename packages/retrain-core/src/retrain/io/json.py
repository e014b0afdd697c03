"""JSON loading that never raises on a damaged file, and compact JSONL row encoding.

Run directories are read while a trainer writes them, so every reader here treats a missing,
half-written or non-object file as "no data" (None) instead of an error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

_DECODER = msgspec.json.Decoder()


def decode_object(data: bytes | str) -> dict[str, Any] | None:
    """One JSON object, or None for blank, malformed or non-object input.

    msgspec is the fast path; Python's json is the fallback because rows written with
    `json.dumps` may hold the non-standard literals NaN and Infinity, which msgspec rejects.
    """
    try:
        value = _DECODER.decode(data)
    except msgspec.DecodeError:
        try:
            value = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


def load_json_object(path: str | Path, *, max_bytes: int = 64 << 20) -> dict[str, Any] | None:
    """The object in a JSON file; None when it is missing, unreadable, too large or damaged."""
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError:
        return None
    if len(data) > max_bytes:
        return None
    return decode_object(data)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def encode_row(row: Mapping[str, Any]) -> bytes:
    """One compact JSONL line (UTF-8, newline-terminated).

    Non-finite floats become null so every line is standard JSON; values JSON cannot hold
    are written as their `str()`.
    """
    try:
        text = json.dumps(row, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    except ValueError:
        text = json.dumps(_finite(row), ensure_ascii=False, separators=(",", ":"), default=str)
    return text.encode("utf-8") + b"\n"
