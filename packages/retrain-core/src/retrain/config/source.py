"""Reading a TOML file, classifying it, and finding the line a key is on."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from retrain.config.errors import ConfigError, ConfigIssue

Kind = Literal["single", "campaign", "squeeze"]

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*(?:"([^"]+)"|'([^']+)'|([A-Za-z0-9_\-]+))\s*=""")
_TOML_LINE = re.compile(r"at line (\d+)")


@dataclass
class TomlSource:
    """A parsed TOML file and its text (for line numbers)."""

    path: str
    data: dict[str, Any]
    text: str = ""
    _lines: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)

    @property
    def kind(self) -> Kind:
        return config_kind(self.data)

    def line_of(self, section: str, key: str | None = None) -> int | None:
        """1-based line of `key` in `[section]` (or of the header when key is None)."""
        if not self._lines and self.text:
            self._index()
        return self._lines.get((section, key or ""))

    def _index(self) -> None:
        current = ""
        for number, line in enumerate(self.text.splitlines(), start=1):
            header = _HEADER.match(line)
            if header:
                current = _section_name(header.group(1))
                self._lines.setdefault((current, ""), number)
                continue
            key = _KEY.match(line)
            if key:
                name = key.group(1) or key.group(2) or key.group(3)
                self._lines.setdefault((current, name), number)


def config_kind(data: dict[str, Any]) -> Kind:
    """campaign when a [campaign] table exists, else squeeze for [squeeze], else single."""
    if isinstance(data.get("campaign"), dict):
        return "campaign"
    if isinstance(data.get("squeeze"), dict):
        return "squeeze"
    return "single"


def read_toml(path: str | Path) -> TomlSource:
    """Parse a TOML file; every failure is a one-line ConfigError naming the file."""
    p = Path(path)
    shown = str(path)
    if not p.exists():
        raise ConfigError.single("file not found", path=shown,
                                 hint="pass a config path, or run `retrain init` to create retrain.toml")
    if p.is_dir():
        raise ConfigError.single("is a directory, not a TOML file", path=shown)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError.single(f"cannot read: {exc.strerror or exc}", path=shown) from None
    return parse_toml(raw, shown)


def parse_toml(raw: bytes | str, shown: str) -> TomlSource:
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise ConfigError.single(f"not UTF-8 text (byte {exc.start})", path=shown) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _TOML_LINE.search(msg)
        line = int(m.group(1)) if m else None
        if line is not None and (twice := _defined_twice(text, line, msg)):
            raise ConfigError([replace(twice, path=shown, line=line)]) from None
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", msg)
        msg = re.sub(r"\s*\(at end of document\)", " at end of document", msg)
        raise ConfigError.single(f"malformed TOML: {msg}", path=shown, line=line) from None
    return TomlSource(shown, data, text)


def _defined_twice(text: str, line: int, msg: str) -> ConfigIssue | None:
    """The key or table that tomllib refused to redefine at `line`, named with its first line.

    tomllib says only "Cannot overwrite a value" / "Cannot declare ('x',) twice"; the index
    of keys per section (built from the text, which parsed up to `line`) names the culprit.
    """
    if not (msg.startswith("Cannot overwrite") or msg.startswith("Cannot declare")):
        return None
    lines = text.splitlines()
    before = lines[: line - 1]
    seen = TomlSource("", {}, "\n".join(before))
    headers = [_section_name(h.group(1)) for earlier in before if (h := _HEADER.match(earlier))]
    current = headers[-1] if headers else ""
    here = lines[line - 1] if line <= len(lines) else ""
    if header := _HEADER.match(here):
        name = _section_name(header.group(1))
        first = seen.line_of(name)
        message = f"table declared twice (first on line {first})" if first else "already defined earlier in the file"
        return ConfigIssue(message, key=f"[{name}]")
    if key := _KEY.match(here):
        name = key.group(1) or key.group(2) or key.group(3)
        first = seen.line_of(current, name)
        where = f" (first on line {first})" if first else ""
        label = f"[{current}] {name}" if current else name
        return ConfigIssue(f"set twice{where}", key=label)
    return None


def _section_name(header: str) -> str:
    return ".".join(p.strip().strip('"') for p in header.split("."))
