"""Evaluation from n >= k samples per problem: pass@1 = c/n and pass@k by the unbiased
estimator over all n samples, maj@k averaged over disjoint blocks of k; `[eval] n` defaults
to k, is checked against k, and resolves into the plan. A reward that cannot score is as
loud in evaluation as in training: the row counts the failed samples (they scored 0), the
evaluation hands back the first fault of each kind, the console line shows the count."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from core_stubs import CharTokenizer

from retrain.config.errors import ConfigError
from retrain.evaluation.estimators import pass_at_k
from retrain.evaluation.evaluate import encode_problems, evaluate
from retrain.evaluation.row import EvalRow
from retrain.evaluation.settings import EvalPlan
from retrain.rewards.boxed import MatchReward
from retrain.rewards.create import RewardScorer
from retrain.training.console import eval_line
from retrain.types import Completion, Example, SamplingParams
from retrain.validation.load import load_config


class ScriptedSampler:
    def __init__(self, script: dict[str, list[str]]) -> None:
        self.tokenizer = CharTokenizer()
        self.script = script
        self.asked: list[int] = []

    def sample(self, prompts: Sequence[Sequence[int]], num_samples: int,
               params: SamplingParams) -> list[list[Completion]]:
        self.asked.append(num_samples)
        return [[Completion(token_ids=[ord(ch) for ch in t], logprobs=[0.0] * len(t), finish_reason="stop")
                 for t in self.script[self.tokenizer.decode(ids)][:num_samples]] for ids in prompts]


SCRIPT = {
    "1+1=": [r"\boxed{2}", r"\boxed{3}", r"\boxed{2}", r"\boxed{2}"],  # 3 of 4 pass
    "2+2=": [r"\boxed{5}", r"\boxed{5}", r"\boxed{4}", "no box"],     # 1 of 4
    "3+3=": ["x", "y", "z", "w"],                                     # none
}
PROBLEMS = [Example(prompt=p, reference=str(2 * int(p[0]))) for p in SCRIPT]
PARAMS = SamplingParams(max_tokens=100, temperature=1.0, seed=7)


def test_pass_at_k_from_more_samples_than_k() -> None:
    sampler = ScriptedSampler(SCRIPT)
    result = evaluate(sampler, encode_problems(PROBLEMS, sampler.tokenizer), RewardScorer("m", MatchReward(),
                      mode="inline"), 2, n=4, params=PARAMS)
    row = result.row
    assert sampler.asked == [4] and (row.k, row.n) == (2, 4)
    assert row.pass_at_1 == pytest.approx((3 / 4 + 1 / 4 + 0) / 3)
    # 1 - C(n-c, 2) / C(4, 2) per problem: 1, 1/2 and 0, not "any of the 4 passed" (2/3)
    assert row.pass_at_k == pytest.approx((pass_at_k(4, 3, 2) + pass_at_k(4, 1, 2) + 0) / 3) == pytest.approx(0.5)
    # majority of each block of 2: "1+1=" votes 2 (tie, first seen) then 2; "2+2=" 5 then 4
    assert row.maj_at_k == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert [len(p.rewards) for p in result.problems] == [4, 4, 4]
    d = row.to_dict()
    assert d["eval/n"] == 4 and d["eval/k"] == 2 and "eval/pass@2" in d and "eval/pass@4" not in d
    assert EvalRow.from_dict(d) == row


def test_n_below_k_is_refused() -> None:
    sampler = ScriptedSampler(SCRIPT)
    with pytest.raises(ValueError, match="k <= n"):
        evaluate(sampler, encode_problems(PROBLEMS, sampler.tokenizer), MatchReward(), 4, n=2, params=PARAMS)


def test_rows_written_before_n_read_as_n_equals_k() -> None:
    old = {"step": 3, "eval/k": 4, "eval/pass@1": 0.5, "eval/pass@4": 0.75}
    row = EvalRow.from_dict(old)
    assert row is not None and row.n == 4


def config(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text("[training]\nbatch_size = 4\ngroup_size = 8\ntemperature = 0.9\n" + text)
    return p


def test_eval_n_resolves_into_the_plan(tmp_path: Path) -> None:
    loaded = load_config(config(tmp_path, "[eval]\nk = 1\nn = 8\n"))
    plan = EvalPlan.of(loaded.config)
    assert (plan.k, plan.n, plan.per_call) == (1, 8, 4)
    assert plan.params.temperature == 0.9  # eight samples of one problem are not greedy
    default = EvalPlan.of(load_config(config(tmp_path, "[eval]\nk = 2\n")).config)
    assert (default.k, default.n) == (2, 2)
    assert EvalPlan.of(loaded.config, k=2, n=16).n == 16
    with pytest.raises(ValueError, match="cannot estimate pass@16"):
        EvalPlan.of(loaded.config, k=16)


def test_eval_n_below_k_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(config(tmp_path, "[eval]\nk = 4\nn = 2\n"))
    [issue] = info.value.issues
    assert issue.key == "[eval] n" and "n must be >= k" in issue.render()

class TypoReward:
    """Scores "\\boxed{2}" and raises on everything else (int + str)."""

    def score(self, response: str, reference: str) -> float:
        if response == r"\boxed{2}":
            return 1.0
        return float(int(reference) + "1")  # type: ignore[operator]


def test_failed_samples_are_counted_and_their_fault_handed_back() -> None:
    sampler = ScriptedSampler(SCRIPT)
    result = evaluate(sampler, encode_problems(PROBLEMS, sampler.tokenizer),
                      RewardScorer("typo", TypoReward(), mode="inline"), 2, n=4, params=PARAMS)
    row = result.row
    assert row.reward_errors == 12 - 3  # three samples of "1+1=" score, nine raise
    assert [f.kind.split(" ")[0] for f in result.faults] == ["TypeError"]
    assert "int" in result.faults[0].line() and "str" in result.faults[0].line()
    assert row.pass_at_1 == (3 / 4) / 3
    d = row.to_dict()
    assert d["eval/reward_errors"] == 9 and EvalRow.from_dict(d) == row
    assert eval_line(d).endswith("reward_errors=9/12")


def test_a_clean_evaluation_writes_and_prints_no_count() -> None:
    row = EvalRow(step=2, k=1, examples=3, mean_reward=0.5, pass_at_1=0.5, pass_at_k=0.5, maj_at_k=None,
                  mean_tokens=4.0, truncated_share=0.0, wall_s=0.1)
    assert "eval/reward_errors" not in row.to_dict()
    assert "reward_errors" not in eval_line(row.to_dict())
    assert EvalRow.from_dict({"step": 1, "eval/k": 1, "eval/pass@1": 0.5}).reward_errors == 0  # type: ignore[union-attr]
