"""Trackers: each name in `[logging] trackers` is a built-in, a registered name, an entry point
of group `retrain.trackers` or a dotted path (imported by the plugins pass), and names one
tracker once. Whether a built-in's package is installed is checked when the run starts, which
says what to install (`retrain explain` lists it beforehand)."""

from __future__ import annotations

from collections import Counter

from retrain.config.errors import ConfigIssue
from retrain.config.schema import TrainConfig
from retrain.registry import builtin
from retrain.validation.mode import check_selector

KEY = "[logging] trackers"


def check_trackers(c: TrainConfig) -> list[ConfigIssue]:
    names = c.logging.trackers
    issues = [issue for name in names
              if (issue := check_selector(name, builtin.TRACKERS, builtin.ENTRY_POINT_GROUPS["tracker"], KEY,
                                          "tracker")) is not None]
    issues += [ConfigIssue(f"{name!r} is named {n} times", key=KEY, hint="name each tracker once")
               for name, n in Counter(names).items() if n > 1]
    return issues
