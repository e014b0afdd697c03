"""Shared by retrain-core's tests: this folder on the path for its helper modules."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # core_stubs: the character tokenizer
