"""`trainer = "ttt_discover"`: the rules of the TTT-Discover runner (spec algorithms.md §13)."""

from __future__ import annotations

from typing import Any

from retrain.config.errors import ConfigIssue
from retrain.config.schema import TrainConfig

#: [algorithm.params] the runner reads: name -> (integer only, smallest value)
DISCOVER_PARAMS: dict[str, tuple[bool, float]] = {
    "context_k": (True, 0), "puct_c": (False, 0.0), "archive_max_entries": (True, 1),
    "candidate_char_limit": (True, 1), "context_char_limit": (True, 1),
}


def check_discover(c: TrainConfig) -> list[ConfigIssue]:
    if c.training.trainer != "ttt_discover":
        return []
    issues: list[ConfigIssue] = []
    if c.resume.from_:
        issues.append(ConfigIssue("a TTT-Discover run cannot resume (its archive is not checkpointed)",
                                  key="[resume] from", hint="start a fresh run"))
    if c.training.max_async_level:
        issues.append(ConfigIssue("TTT-Discover samples each step from the archive the previous step updated",
                                  key="[training] max_async_level", hint="max_async_level = 0"))
    if c.backpressure.enabled:
        issues.append(ConfigIssue("TTT-Discover keeps batch_size start states per step",
                                  key="[backpressure] enabled", hint="enabled = false"))
    if c.training.dynamic_sampling:
        issues.append(ConfigIssue("TTT-Discover samples each step's start states from the archive, not from a "
                                  "data cursor more prompts could come from", key="[training] dynamic_sampling",
                                  hint="dynamic_sampling = false"))
    for name, (integer, low) in DISCOVER_PARAMS.items():
        if name in c.algorithm.params and not _number(c.algorithm.params[name], integer, low):
            kind = "an integer" if integer else "a number"
            issues.append(ConfigIssue(f"{c.algorithm.params[name]!r} must be {kind} >= {low:g}",
                                      key=f"[algorithm.params] {name}"))
    return issues


def _number(value: Any, integer: bool, low: float) -> bool:
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        return False
    return bool(value >= low)
