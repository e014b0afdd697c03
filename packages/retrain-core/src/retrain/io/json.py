"""JSON loading that never raises on a damaged file (writing is io/atomic.py and io/log.py),
and the line reader of files users write by hand, which names the line that is wrong.

Run directories are read while a trainer writes them, so every reader of them here treats a
missing, half-written or non-object file as "no data" (None) instead of an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
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


def numbered_rows(path: str | Path, error: type[Exception] = ValueError) -> Iterator[tuple[int, Any]]:
    """(line number, value) of every non-blank line of a user's JSONL file; a line that is not
    UTF-8 or not JSON raises `error` with `path:line`."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise error(f"{path}:{n}: not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the "
                            "line)") from None
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except ValueError as exc:
                why = f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else str(exc)
                raise error(f"{path}:{n}: not JSON ({why})") from None
