"""Plugin and test templates: text files beside this module with __NAME__ / __CLASS__ /
__ATTR__ / __MODULE_PATH__ placeholders."""

from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).with_name("templates")


def render(file: str, **values: str) -> str:
    text = (FOLDER / file).read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace(f"__{key.upper()}__", value)
    return text
