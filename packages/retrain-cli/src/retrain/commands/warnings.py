"""Config warnings on stderr, one line each."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from retrain.config.errors import ConfigIssue


def print_warnings(warnings: Sequence[ConfigIssue]) -> None:
    for w in warnings:
        print(f"warning: {w.render()}", file=sys.stderr)
