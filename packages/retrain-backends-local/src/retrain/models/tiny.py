"""The built-in offline model `tiny`: a small Qwen3 config and a character tokenizer.

Both ship as a few KB of JSON beside this module (made by scripts/build_tiny_assets.py).
Weights are initialised from the seed, so `tiny` needs no download and is reproducible.
"""

from __future__ import annotations

from pathlib import Path

ASSETS = Path(__file__).with_name("tiny")
NAMES = frozenset({"tiny", "retrain/tiny"})


def is_tiny(name: str) -> bool:
    return name in NAMES
