"""`[eval]`: values and the rules that tie evaluation to the rest of the config."""

from __future__ import annotations

from retrain.config.errors import ConfigIssue
from retrain.config.schema import TrainConfig
from retrain.evaluation.problems import HELD_OUT_SOURCES
from retrain.evaluation.settings import EvalSchedule


def check_eval(c: TrainConfig) -> list[ConfigIssue]:
    e = c.eval
    issues: list[ConfigIssue] = []
    if -1 < e.temperature < 0:
        issues.append(ConfigIssue(f"{e.temperature} must be -1 (0 for one sample per problem, else the "
                                  "training temperature) or >= 0", key="[eval] temperature", hint="temperature = -1"))
    if e.n and e.n < e.k:
        issues.append(ConfigIssue(f"{e.n} samples per problem cannot estimate pass@{e.k}: n must be >= k",
                                  key="[eval] n", hint=f"n = {e.k} or more, or 0 (= k)"))
    if not EvalSchedule.of(c).enabled:
        return issues
    if not c.is_rl:
        issues.append(ConfigIssue(f"evaluation during training runs in the RL trainer, not trainer = "
                                  f"{c.training.trainer!r}", key="[eval] every",
                                  hint="evaluate its adapter with `retrain eval CONFIG --adapter DIR`"))
    if not e.data_path:
        if c.environment.provider:
            issues.append(ConfigIssue("an environment's eval split is not built yet; evaluate on a file",
                                      key="[eval] data_path", hint='data_path = "eval.jsonl"'))
        elif c.data.source not in HELD_OUT_SOURCES:
            issues.append(ConfigIssue(f"[data] source {c.data.source!r} has no held-out split (only "
                                      f"{' and '.join(HELD_OUT_SOURCES)} do); evaluate on a file",
                                      key="[eval] data_path", hint='data_path = "eval.jsonl"'))
    return issues
