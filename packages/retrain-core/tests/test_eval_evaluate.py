"""`evaluate` reduces k samples per problem to pass@1, pass@k and maj@k; `[eval]` resolves
into a schedule and seeded sampling parameters."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from core_stubs import CharTokenizer

from retrain.config.errors import ConfigError
from retrain.evaluation.evaluate import encode_problems, evaluate
from retrain.evaluation.row import EvalRow
from retrain.evaluation.settings import EvalPlan, EvalSchedule
from retrain.rewards.boxed import MatchReward
from retrain.rewards.create import RewardScorer
from retrain.types import Completion, Example, SamplingParams
from retrain.validation.load import load_config


class ScriptedSampler:
    """Answers each prompt with the texts scripted for it, in turn; records every call."""

    def __init__(self, script: dict[str, list[str]], max_tokens: int = 100) -> None:
        self.tokenizer = CharTokenizer()
        self.script = script
        self.calls: list[tuple[int, int, SamplingParams]] = []
        self.max_tokens = max_tokens

    def sample(self, prompts: Sequence[Sequence[int]], num_samples: int,
               params: SamplingParams) -> list[list[Completion]]:
        self.calls.append((len(prompts), num_samples, params))
        out = []
        for ids in prompts:
            texts = self.script[self.tokenizer.decode(ids)][:num_samples]
            out.append([Completion(token_ids=[ord(ch) for ch in t][: self.max_tokens], logprobs=[0.0] * len(t),
                                   finish_reason="length" if len(t) >= self.max_tokens else "stop") for t in texts])
        return out


SCRIPT = {
    "1+1=": [r"\boxed{2}", r"\boxed{3}", r"\boxed{2}", r"\boxed{2}"],  # 3 of 4, majority right
    "2+2=": [r"\boxed{5}", r"\boxed{5}", r"\boxed{4}", "no box"],     # 1 of 4, majority wrong
    "3+3=": ["x", "y", "z", "w"],                                     # none
}
PROBLEMS = [Example(prompt=p, reference=str(2 * int(p[0]))) for p in SCRIPT]
PARAMS = SamplingParams(max_tokens=100, temperature=1.0, seed=1000)


def test_metrics_of_a_scripted_policy() -> None:
    sampler = ScriptedSampler(SCRIPT)
    problems = encode_problems(PROBLEMS, sampler.tokenizer)
    done: list[int] = []
    result = evaluate(sampler, problems, RewardScorer("match", MatchReward(), mode="inline"), 4, params=PARAMS,
                      step=7, per_call=2, progress=done.append)
    row = result.row
    assert row.step == 7 and row.k == 4 and row.examples == 3
    assert row.pass_at_1 == pytest.approx((3 / 4 + 1 / 4 + 0) / 3)
    assert row.pass_at_k == pytest.approx(2 / 3)
    assert row.maj_at_k == pytest.approx(1 / 3)
    assert row.mean_reward == pytest.approx(4 / 12)
    assert 0 <= row.pass_at_1 <= row.pass_at_k <= 1
    assert [p.passed for p in result.problems] == [3, 1, 0]
    assert result.problems[1].sample == r"\boxed{4}"  # the first passing sample
    assert result.problems[2].sample == "x"  # else the first
    # two calls of at most 2 problems, each from its own seed; progress after each
    assert [(n, k, p.seed) for n, k, p in sampler.calls] == [(2, 4, 1000), (1, 4, 1001)]
    assert done == [2, 3]
    d = row.to_dict()
    assert {"eval/pass@1", "eval/pass@4", "eval/maj@4", "eval/k", "eval/wall_s"} <= set(d)
    assert EvalRow.from_dict(d) == row


def test_no_majority_without_an_extracted_answer_and_k_1_has_one_pass_key() -> None:
    class Digits:
        def score(self, response: str, reference: str) -> float:
            return float(reference in response)

    sampler = ScriptedSampler(SCRIPT, max_tokens=5)
    result = evaluate(sampler, encode_problems(PROBLEMS, sampler.tokenizer), RewardScorer("d", Digits(), mode="inline"),
                      1, params=PARAMS)
    d = result.row.to_dict()
    assert result.row.maj_at_k is None and not any(key.startswith("eval/maj") for key in d)
    assert [key for key in d if key.startswith("eval/pass")] == ["eval/pass@1"]
    assert result.row.truncated_share == pytest.approx(2 / 3)  # "\boxed{2}" and "\boxed{5}" hit 5 tokens


def test_pass_threshold() -> None:
    class Half:
        def score(self, response: str, reference: str) -> float:
            return 0.5

    sampler = ScriptedSampler(SCRIPT)
    problems = encode_problems(PROBLEMS, sampler.tokenizer)
    scorer = RewardScorer("half", Half(), mode="inline")
    assert evaluate(sampler, problems, scorer, 2, params=PARAMS).row.pass_at_1 == 0.0
    assert evaluate(sampler, problems, scorer, 2, params=PARAMS, pass_threshold=0.5).row.pass_at_1 == 1.0


def test_unseeded_params_are_refused() -> None:
    sampler = ScriptedSampler(SCRIPT)
    with pytest.raises(ValueError, match="seed"):
        evaluate(sampler, [], MatchReward(), 1, params=SamplingParams(max_tokens=4))


def test_schedule() -> None:
    s = EvalSchedule(every=3, before_train=True, at_end=True)
    assert [n for n in range(11) if s.due(n, 10)] == [0, 3, 6, 9, 10]
    assert [n for n in range(11) if EvalSchedule(0, False, True).due(n, 10)] == [10]
    assert not EvalSchedule(0, False, False).enabled


def test_plan_resolves_defaults_from_training() -> None:
    base = ["--temperature", "0.9", "--top-p", "0.8", "--max-tokens", "40", "--batch-size", "4", "--group-size", "8"]
    plan = EvalPlan.of(load_config(None, base).config)
    assert not plan.schedule.enabled
    assert (plan.k, plan.params.temperature, plan.params.top_p, plan.params.max_tokens) == (1, 0.0, 0.8, 40)
    assert plan.per_call == 32 and plan.params.seed is not None
    c = load_config(None, [*base, "--eval-every", "5", "--eval-k", "8", "--eval-max-tokens", "12"]).config
    plan = EvalPlan.of(c)
    assert plan.schedule == EvalSchedule(5, False, True)  # at_end follows every
    assert (plan.params.temperature, plan.params.max_tokens, plan.per_call) == (0.9, 12, 4)
    plan = EvalPlan.of(load_config(None, [*base, "--eval-every", "5", "--eval-at-end", "false",
                                          "--eval-temperature", "0.3"]).config)
    assert plan.schedule.at_end is False and plan.params.temperature == 0.3
    # evaluation's stream depends on the training seed only
    assert EvalPlan.of(c).params.seed == EvalPlan.of(load_config(None, base).config).params.seed


def test_bad_eval_values_name_the_key() -> None:
    for args, message in ((["--eval-k", "0"], "--eval-k"), (["--eval-every", "-1"], "--eval-every"),
                          (["--eval-temperature", "-0.5"], "--eval-temperature"),
                          (["--eval-top-p", "2"], "--eval-top-p"), (["--eval-at-end", "maybe"], "--eval-at-end")):
        with pytest.raises(ConfigError, match=message):
            load_config(None, args)
    with pytest.raises(ConfigError, match=r"--eval-every \(command line\): evaluation during training runs in the RL"):
        load_config(None, ["--eval-every", "1", "--trainer", "command", "--trainer-command", "true"])
