"""The rows an evaluation writes: one line of `eval.jsonl` per evaluation, and one line per
problem in `eval/step_N.jsonl`.

`step` is the number of RL steps the evaluated policy has taken (0 = before the first RL
step, after any SFT warmup; N = after RL step N-1, the policy `checkpoint_step_N` holds).
The metric keys carry the configured k (`eval/pass@8`), so `eval/k` says which to read;
`eval/n` is the number of samples per problem they are estimated from (rows written before it
existed drew n = k).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

PREFIX = "eval/"


def pass_key(k: int) -> str:
    return f"{PREFIX}pass@{k}"


def maj_key(k: int) -> str:
    return f"{PREFIX}maj@{k}"


class EvalRow(msgspec.Struct, kw_only=True):
    step: int
    k: int
    examples: int
    mean_reward: float
    pass_at_1: float
    pass_at_k: float
    #: None when the reward exposes no extracted answer (nothing to vote on)
    maj_at_k: float | None
    mean_tokens: float
    truncated_share: float
    wall_s: float
    #: samples per problem the estimates come from, >= k; 0 at construction means k
    n: int = 0
    #: samples the reward failed to score (raised, timed out, no number): they scored 0
    reward_errors: int = 0

    def __post_init__(self) -> None:
        if self.n == 0:
            self.n = self.k

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"step": self.step, PREFIX + "k": self.k, PREFIX + "n": self.n,
                               PREFIX + "examples": self.examples,
                               PREFIX + "mean_reward": self.mean_reward, pass_key(1): self.pass_at_1,
                               pass_key(self.k): self.pass_at_k}
        if self.maj_at_k is not None:
            row[maj_key(self.k)] = self.maj_at_k
        row.update({PREFIX + "mean_tokens": self.mean_tokens, PREFIX + "truncated_share": self.truncated_share,
                    PREFIX + "wall_s": self.wall_s})
        if self.reward_errors:
            row[PREFIX + "reward_errors"] = self.reward_errors
        return row

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> EvalRow | None:
        """The row of an `eval.jsonl` line, or None when it is not one."""
        def num(key: str) -> float | None:
            v = row.get(key)
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        step, k = row.get("step"), row.get(PREFIX + "k")
        if not isinstance(step, int) or not isinstance(k, int) or isinstance(k, bool) or k < 1:
            return None
        p1, pk = num(pass_key(1)), num(pass_key(k))
        if p1 is None or pk is None:
            return None
        n = row.get(PREFIX + "n", k)
        if not isinstance(n, int) or isinstance(n, bool) or n < k:
            return None
        return cls(step=step, k=k, n=n, examples=int(num(PREFIX + "examples") or 0),
                   mean_reward=num(PREFIX + "mean_reward") or 0.0, pass_at_1=p1, pass_at_k=pk,
                   maj_at_k=num(maj_key(k)), mean_tokens=num(PREFIX + "mean_tokens") or 0.0,
                   truncated_share=num(PREFIX + "truncated_share") or 0.0, wall_s=num(PREFIX + "wall_s") or 0.0,
                   reward_errors=int(num(PREFIX + "reward_errors") or 0))


class ProblemResult(msgspec.Struct, kw_only=True):
    """One problem of one evaluation: its n rewards and one sample (the first that passed,
    else the first)."""

    id: int | str
    prompt: str
    reference: str
    rewards: list[float]
    passed: int
    sample: str
