"""Naming the culprit when a data file cannot be read: `file:line` for text a person wrote.

`datasets` reads the files; this module only looks again when it fails (or, for bytes that
are not UTF-8, which Arrow would carry into the rows unchecked, before it reads), so that the
error is one line a user can act on: `data.jsonl:52: not JSON (Expecting ',' delimiter at
column 35)`, never a traceback or a row number inside a parser's chunk.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from retrain.data.source import DataError

_BLOCK = 1 << 20


def _lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(first line number, byte offset, chunk) of whole lines, about a MiB at a time."""
    line, offset, rest = 1, 0, b""
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            data = rest + block
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                continue
            yield line, offset, data[:cut]
            line += data.count(b"\n", 0, cut)
            offset += cut
            rest = data[cut:]
    if rest:
        yield line, offset, rest


def check_utf8(path: Path) -> None:
    """A DataError at the first line of `path` that is not UTF-8."""
    for line, _, chunk in _lines(path):
        try:
            chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            at = line + chunk.count(b"\n", 0, exc.start)
            column = exc.start - (chunk.rfind(b"\n", 0, exc.start) + 1) + 1
            raise DataError(f"{path}:{at}: not UTF-8 (byte 0x{chunk[exc.start]:02x} at byte {column} of the line)",
                            hint="save the file as UTF-8") from None


def json_lines_problem(path: Path) -> str:
    """The first line of a JSON Lines file that is not a JSON object, as `path:line: why`; ''."""
    for first, _, chunk in _lines(path):
        for n, raw in enumerate(chunk.split(b"\n"), start=first):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except ValueError as exc:
                where = f" at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                return f"{path}:{n}: not JSON ({reason}{where})"
            if not isinstance(value, dict):
                return f"{path}:{n}: not a JSON object ({_short(raw)})"
    return ""


def json_document_problem(path: Path) -> str:
    """Why a `.json` file is not a JSON list of objects, as `path:line: why`; ''."""
    text = path.read_text(encoding="utf-8")
    if not text.lstrip().startswith("["):
        return json_lines_problem(path)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"{path}:{exc.lineno}: not JSON ({exc.msg} at column {exc.colno})"
    odd = next((i for i, item in enumerate(value) if not isinstance(item, dict)), None)
    return f"{path}: item {odd} of the list is not a JSON object" if odd is not None else ""


def _short(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    return text if len(text) <= 40 else text[:37] + "..."


def _innermost(exc: BaseException) -> BaseException:
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return exc


_CSV_LINE = re.compile(r"\bline (\d+)")


def explain_failure(key: str, files: list[Path], builder: str, exc: BaseException) -> DataError:
    """The DataError for files `datasets` failed to read: the file and line when one is found."""
    cause = _innermost(exc)
    message = " ".join(str(cause).split()) or type(cause).__name__
    for f in files:
        if builder == "json":
            problem = json_lines_problem(f) if f.suffix.lower() == ".jsonl" else json_document_problem(f)
            if problem:
                return DataError(problem)
        if builder == "csv" and len(files) == 1 and (found := _CSV_LINE.search(message)):
            return DataError(f"{f}:{found[1]}: not CSV ({message})")
    where = str(files[0]) if len(files) == 1 else f"{key} ({len(files)} {builder} files)"
    return DataError(f"{where}: cannot be read as {builder} ({type(cause).__name__}: {message})")
