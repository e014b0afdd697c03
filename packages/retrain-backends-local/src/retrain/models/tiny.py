"""The built-in offline model `tiny`: a small Qwen3 config and a character tokenizer.

Both ship as a few KB of JSON beside this module (made by scripts/build_tiny_assets.py).
Weights are initialised from the seed, so `tiny` needs no download and is reproducible.
"""

from __future__ import annotations

import json
from pathlib import Path

from retrain.backends.export import EXPORT_RECORD

ASSETS = Path(__file__).with_name("tiny")
NAMES = frozenset({"tiny", "retrain/tiny"})


def is_tiny(name: str) -> bool:
    return name in NAMES


def is_tiny_export(name: str) -> bool:
    """Whether `name` is a folder `retrain export` wrote from a model trained on `tiny`: a
    character model from random weights that, like `tiny`, reads no written instructions."""
    record = Path(name).expanduser() / EXPORT_RECORD
    if not record.is_file():
        return False
    try:
        base = json.loads(record.read_text()).get("base_model", {})
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(base, dict) and is_tiny(str(base.get("name", "")))


def from_tiny(name: str) -> bool:
    """`tiny` or an export of it: a model that reads no instructions (built-in problems reach
    it as the bare question, retrain.data.chat, as they did in training) and is never checked
    for having learned English (retrain.models.untrained)."""
    return is_tiny(name) or is_tiny_export(name)
