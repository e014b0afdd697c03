"""DAPO's objectives in the RL loop (retrain.training.dapo): the soft overlong punishment
and the truncation mask against hand-computed values and the worked example of
docs/advantages.md, and dynamic sampling's rounds, marks, cursor and seeds on a scripted
backend; their config keys are live, refused or warned about by name."""

from __future__ import annotations

import pickle
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from core_stubs import CharTokenizer

from retrain.advantages.pipeline import build_pipeline
from retrain.config.errors import ConfigError
from retrain.config.schema import AlgorithmConfig, TrainConfig, TrainingConfig
from retrain.errors import UserError
from retrain.rewards.types import RewardBatch, RewardFault
from retrain.rollout.episode import Episode, Segment, Turn
from retrain.rollout.group import FillReport, Group, StepRollouts
from retrain.training.backpressure import build_backpressure
from retrain.training.console import step_line, summary_lines
from retrain.training.dapo.dynamic import (
    SURPLUS,
    ZERO_VARIANCE,
    DynamicSampling,
    merge_env_metrics,
    round_size,
    select,
)
from retrain.training.dapo.overlong import OverlongShaping, overlong_penalty
from retrain.training.flow import Flow
from retrain.training.producer import RolloutProducer
from retrain.training.prompts import PromptCursor
from retrain.training.sepa import SepaController
from retrain.training.state import TrainerState, read_state, write_state
from retrain.training.step import advantages, collect, step_advantages
from retrain.types import Completion, Example, SamplingParams
from retrain.validation.load import load_config

DOCS = Path(__file__).resolve().parents[3] / "docs"


class ScriptedBackend:
    """Answers prompt `p` with the texts `script[p]` (a text that reaches max_tokens is cut
    there, finish_reason "length"); records each call's prompts and batch id."""

    def __init__(self, script: dict[str, list[str]], max_tokens: int) -> None:
        self.script, self.max_tokens = script, max_tokens
        self.tokenizer = CharTokenizer()
        self.calls: list[tuple[list[str], int | None]] = []
        self.published = 0

    def checkpoint(self, name: str) -> None:
        self.published += 1

    def sample(self, prompts: Sequence[Sequence[int]], num_samples: int,
               params: SamplingParams) -> list[list[Completion]]:
        texts = [self.tokenizer.decode(p) for p in prompts]
        self.calls.append((texts, params.batch_id))
        out = []
        for text in texts:
            group = []
            for t in self.script[text][:num_samples]:
                ids = [ord(ch) for ch in t][: self.max_tokens]
                group.append(Completion(token_ids=ids, logprobs=[-0.5] * len(ids),
                                        finish_reason="length" if len(t) >= self.max_tokens else "stop"))
            out.append(group)
        return out


class FirstCharReward:
    """1 for a completion that starts with "y", else 0."""

    def score_batch(self, responses: Sequence[str], references: Sequence[str]) -> RewardBatch:
        return RewardBatch(np.asarray([float(r.startswith("y")) for r in responses]))


def config(**training: object) -> TrainConfig:
    return TrainConfig(algorithm=AlgorithmConfig(advantage_mode="grpo", transform_mode="none"),
                       training=TrainingConfig(**{"max_tokens": 12, **training}))  # type: ignore[arg-type]


def flow_of(c: TrainConfig) -> Flow:
    t = c.training
    return Flow(pipeline=build_pipeline(c), sepa=SepaController.from_config(c), backpressure=build_backpressure(c),
                reward=FirstCharReward(), detector=None, sampling=SamplingParams(max_tokens=t.max_tokens),
                overlong=OverlongShaping.of(c), mask_truncated=t.mask_truncated_completions)


def batch_of(backend: ScriptedBackend, prompts: Sequence[str]) -> list[tuple[Example, list[int]]]:
    return [(Example(prompt=p), backend.tokenizer.encode_prompt(p)) for p in prompts]


# -- the soft overlong punishment ----------------------------------------------------------

def test_the_overlong_penalty_is_the_hand_computed_one() -> None:
    # max_tokens 12, buffer 4: free up to 8 tokens, then -1/4 a token down to -1 at 12
    got = overlong_penalty([0, 6, 8, 9, 10, 11, 12], 12, 4)
    assert got.tolist() == [0.0, 0.0, 0.0, -0.25, -0.5, -0.75, -1.0]
    assert overlong_penalty([9, 12], 12, 4, factor=0.5).tolist() == [-0.125, -0.5]  # verl's penalty_factor
    assert overlong_penalty([90], 100, 20).tolist() == [-0.5]  # TRL's docstring example
    assert overlong_penalty([3, 4], 4, 4).tolist() == [-0.75, -1.0]  # a buffer as long as max_tokens
    assert overlong_penalty([13, 40], 12, 4).tolist() == [-1.0, -1.0]  # past max_tokens: TRL's -1
    assert overlong_penalty([12], 12, 0).tolist() == [0.0]
    assert OverlongShaping.of(config()) is None
    assert OverlongShaping.of(config(overlong_buffer=4)) == OverlongShaping(12, 4, 1.0)


def _docs_example() -> list[dict[str, str]]:
    text = (DOCS / "advantages.md").read_text(encoding="utf-8")
    table = text.split("<!-- overlong-example -->", 1)[1].strip().split("\n\n", 1)[0].splitlines()
    header = [h.strip() for h in table[0].strip("|").split("|")]
    return [dict(zip(header, (v.strip() for v in line.strip("|").split("|")), strict=True)) for line in table[2:]]


def test_the_docs_worked_example_is_what_the_trainer_computes() -> None:
    rows = _docs_example()
    assert [r["completion"] for r in rows] == ["a", "b", "c", "d", "e"]
    texts = [("y" if r["reward"] == "1" else "n") * int(r["tokens"]) for r in rows]
    backend = ScriptedBackend({"q": texts}, max_tokens=12)
    f = flow_of(config(overlong_buffer=4, mask_truncated_completions=True, group_size=5))
    rollouts = collect(backend, f, batch_of(backend, ["q"]), group_size=5)
    g = rollouts.groups[0]
    assert [c.finish_reason for c in g.completions] == [r["finish_reason"] for r in rows]
    assert g.rewards.tolist() == [float(r["reward"]) for r in rows]
    assert g.penalties is not None
    assert np.allclose(g.penalties, [float(r["penalty"]) for r in rows], atol=1e-12)
    assert np.allclose(g.shaped_rewards, [float(r["shaped reward"]) for r in rows], atol=1e-12)
    adv = advantages(f, rollouts, backend, step=0, adv_clip_max=0.0)  # type: ignore[arg-type]
    assert len(adv.datums) == 5
    for d, r, c in zip(adv.datums, rows, g.completions, strict=True):
        completion = d.advantages[1:]  # the prompt "q" is one token
        trains = any(d.mask or [])
        assert trains == (r["in the loss"] == "yes")
        expected = float(r["advantage"]) if trains else 0.0
        assert np.allclose(completion, expected, atol=1e-12) and len(completion) == len(c.token_ids)
    assert adv.metrics["overlong/masked_completions"] == 1.0 and adv.metrics["overlong/masked_tokens"] == 12.0
    assert adv.metrics["overlong/penalty_mean"] == pytest.approx(-0.4)
    assert adv.metrics["overlong/penalized_share"] == pytest.approx(0.6)
    # the logged reward stays the task's
    assert rollouts.rewards.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0] and adv.correct == 3


def test_the_penalty_takes_part_in_the_reward_ties() -> None:
    backend = ScriptedBackend({"right": ["yyy", "yyyyyyyyyy"], "cut": ["n" * 12, "n" * 12]}, max_tokens=12)
    f = flow_of(config(overlong_buffer=4, group_size=2))
    rollouts = collect(backend, f, batch_of(backend, ["right", "cut"]), group_size=2)
    adv = advantages(f, rollouts, backend, step=0, adv_clip_max=0.0)  # type: ignore[arg-type]
    right, _ = rollouts.groups
    kept, tied = adv.dispositions
    # both right: tied without shaping; 3 and 10 tokens give 1 and 0.5, so the short one gains
    assert kept.train and right.shaped_rewards.tolist() == [1.0, 0.5]
    assert adv.datums[0].advantages[-1] == pytest.approx(0.25) and adv.datums[1].advantages[-1] == pytest.approx(-0.25)
    # both wrong and cut at max_tokens: -1 and -1 tie, no signal
    assert not tied.train and tied.label == "skipped (all same)" and len(adv.datums) == 2
    plain = flow_of(config(group_size=2))
    unshaped = collect(backend, plain, batch_of(backend, ["right"]), group_size=2)
    assert not advantages(plain, unshaped, backend, step=0, adv_clip_max=0.0).datums  # type: ignore[arg-type]


def test_without_the_mask_truncated_completions_train() -> None:
    backend = ScriptedBackend({"q": ["yy", "n" * 12]}, max_tokens=12)
    f = flow_of(config(group_size=2))
    adv = advantages(f, collect(backend, f, batch_of(backend, ["q"]), group_size=2), backend,  # type: ignore[arg-type]
                     step=0, adv_clip_max=0.0)
    assert all(any(d.mask or []) for d in adv.datums) and "overlong/masked_completions" not in adv.metrics
    assert adv.datums[1].advantages[-1] == pytest.approx(-0.5)


def test_multi_turn_groups_are_refused_by_the_penalty() -> None:
    episode = Episode(segments=[Segment(prompt_ids=[1], turns=[Turn(token_ids=[2, 3], logprobs=[0.0, 0.0])])])
    group = Group(Example(prompt="q"), [1], [episode.completion()], ["x"], np.zeros(1), episodes=[episode])
    with pytest.raises(UserError, match=r"\[training\] overlong_buffer: .*multi-turn"):
        OverlongShaping(12, 4).shape([group])


# -- dynamic sampling ----------------------------------------------------------------------

def test_round_sizes_follow_the_share_kept() -> None:
    assert round_size(8, 8, 8) == 0
    assert round_size(8, 0, 8) == 8  # nothing kept yet: a whole batch
    assert round_size(8, 4, 8) == 8  # half kept: 4 missing / 0.5
    assert round_size(8, 6, 8) == 3  # 2 missing / 0.75 = 2.67
    assert round_size(8, 1, 16) == 8  # never more than a batch


def _group(prompt: str, rewards: list[float]) -> Group:
    comps = [Completion(token_ids=[1], logprobs=[0.0]) for _ in rewards]
    return Group(Example(prompt=prompt), [1], comps, ["x"] * len(rewards), np.asarray(rewards))


def test_select_drops_tied_groups_and_marks_the_surplus() -> None:
    groups = [_group("a", [1, 1]), _group("b", [0, 1]), _group("c", [0, 0]), _group("d", [1, 0]),
              _group("e", [0.3, 0.3 + 1e-9]), _group("f", [0, 1]), _group("g", [1])]
    out = select(groups, 2)
    assert [g.dropped for g in out] == [ZERO_VARIANCE, "", ZERO_VARIANCE, "", ZERO_VARIANCE, SURPLUS, SURPLUS]
    assert [g.example.prompt for g in out if not g.dropped] == ["b", "d"]
    # the penalty counts: equal rewards, different penalties, not tied
    shaped = _group("h", [1, 1])
    shaped.penalties = np.asarray([0.0, -0.5])
    assert not select([shaped], 1)[0].dropped


def _rollouts(*groups: Group, env: dict[str, float] | None = None,
              faults: Sequence[RewardFault] = ()) -> StepRollouts:
    return StepRollouts(list(groups), 1.0, 0.5, {"reward_errors": 1.0}, env_metrics=env or {},
                        reward_faults=list(faults))


def test_fill_samples_rounds_until_the_batch_is_full_and_merges_them() -> None:
    asked: list[int] = []
    rounds = iter([
        _rollouts(_group("r1a", [1, 1]), _group("r1b", [0, 0]), _group("r1c", [0, 1]), _group("r1d", [0, 0]),
                  faults=[RewardFault("E", "a"), RewardFault("F", "b")]),
        _rollouts(_group("r2a", [1, 0]), _group("r2b", [0, 1]), faults=[RewardFault("E", "later")]),
    ])

    def more(n: int) -> StepRollouts:
        asked.append(n)
        return next(rounds)

    first = _rollouts(_group("a", [0, 1]), _group("b", [1, 1]), _group("c", [0, 0]), _group("d", [1, 0]),
                      faults=[RewardFault("E", "first")])
    out = DynamicSampling(max_rounds=4).fill(first, 4, more)
    # round 0 kept 2 of 4: 2 missing / 0.5 = 4 prompts; then 1 of 8 more kept: ceil(1 x 8 / 3) = 3
    assert asked == [4, 3]
    assert [g.example.prompt for g in out.groups if not g.dropped] == ["a", "d", "r1c", "r2a"]
    assert [g.example.prompt for g in out.groups if g.dropped == SURPLUS] == ["r2b"]
    assert out.fill == FillReport(target=4, sampled=10, dropped=5, surplus=1, rounds=2)
    assert out.fill.metrics() == {"dynamic/groups_sampled": 10.0, "dynamic/groups_dropped": 5.0,
                                  "dynamic/dropped_share": 0.5, "dynamic/groups_surplus": 1.0,
                                  "dynamic/extra_rounds": 2.0, "dynamic/batch_fill": 1.0}
    assert out.sample_time_s == 3.0 and out.score_time_s == 1.5 and out.reward_metrics == {"reward_errors": 3.0}
    assert [(f.kind, f.message) for f in out.reward_faults] == [("E", "first"), ("F", "b")]


def test_fill_stops_after_max_rounds_and_trains_a_short_batch() -> None:
    asked: list[int] = []

    def more(n: int) -> StepRollouts:
        asked.append(n)
        return _rollouts(*[_group(f"x{len(asked)}{i}", [0, 0]) for i in range(n)])

    out = DynamicSampling(max_rounds=2).fill(_rollouts(_group("a", [0, 1]), _group("b", [1, 1])), 2, more)
    assert asked == [2, 2]  # 1 kept of 2: 1 missing / 0.5; then 1 of 4: ceil(1 x 4 / 1) capped at 2
    assert out.fill is not None and out.fill.rounds == 2 and out.fill.short and out.fill.trained == 1
    assert out.fill.metrics()["dynamic/batch_fill"] == 0.5
    full = DynamicSampling(max_rounds=2).fill(_rollouts(_group("a", [0, 1])), 1, more)
    assert asked == [2, 2] and full.fill == FillReport(1, 1, 0, 0, 0)  # full at once: no round


def test_environment_metrics_merge_by_kind() -> None:
    rows = [{"env/reward/episodic": 1.0, "env/turns_mean": 2.0, "env/turns_max": 3.0, "env/env_s": 1.5,
             "env/metric/len": 4.0},
            {"env/reward/episodic": 0.0, "env/turns_mean": 5.0, "env/turns_max": 7.0, "env/env_s": 0.5,
             "env/metric/len": 1.0, "env/retries": 2.0}]
    assert merge_env_metrics(rows, [2, 6]) == {"env/reward/episodic": 0.25, "env/turns_mean": 4.25,
                                               "env/turns_max": 7.0, "env/env_s": 2.0, "env/metric/len": 1.75,
                                               "env/retries": 2.0}


def test_the_producer_takes_each_round_from_the_cursor_and_seeds_it_by_its_start() -> None:
    prompts = [f"p{i}" for i in range(10)]
    # even prompts tie (both wrong), odd ones do not
    script = {p: (["n", "n"] if i % 2 == 0 else ["y", "n"]) for i, p in enumerate(prompts)}

    def run() -> tuple[ScriptedBackend, PromptCursor, list[StepRollouts]]:
        backend = ScriptedBackend(script, max_tokens=4)
        c = config(batch_size=4, group_size=2, dynamic_sampling=True)
        cursor = PromptCursor([Example(prompt=p) for p in prompts], backend.tokenizer)
        producer = RolloutProducer(backend, flow_of(c), cursor, level=0, max_steps=3,  # type: ignore[arg-type]
                                   dynamic=DynamicSampling.of(c))
        return backend, cursor, [producer.next(step, (4, 2)) for step in range(2)]

    backend, cursor, steps = run()
    # step 0: p0-p3 keep 2, round of 4 (p4-p7) keeps 2; step 1: p8, p9, p0, p1 keep 2, round of 4
    assert backend.calls == [(["p0", "p1", "p2", "p3"], 0), (["p4", "p5", "p6", "p7"], 4),
                             (["p8", "p9", "p0", "p1"], 8), (["p2", "p3", "p4", "p5"], 12)]
    assert cursor.index == 16 and backend.published == 2  # the weights are published once a step
    for rollouts in steps:
        assert rollouts.fill == FillReport(4, 8, 4, 0, 1)
        assert rollouts.producer_metrics["dynamic/extra_rounds"] == 1.0
        trained = [g for g in rollouts.groups if not g.dropped]
        assert len(trained) == 4 and all(g.rewards.tolist() == [1.0, 0.0] for g in trained)
    again = run()
    assert again[0].calls == backend.calls
    assert [[g.dropped for g in r.groups] for r in again[2]] == [[g.dropped for g in r.groups] for r in steps]


def test_dropped_groups_never_reach_the_datums() -> None:
    backend = ScriptedBackend({"a": ["y", "n"], "b": ["y", "y"], "c": ["n", "y"]}, max_tokens=4)
    f = flow_of(config(group_size=2, batch_advantage_norm=True))
    rollouts = collect(backend, f, batch_of(backend, ["a", "b", "c"]), group_size=2)
    rollouts.groups = select(rollouts.groups, 1)
    adv = advantages(f, rollouts, backend, step=0, adv_clip_max=0.0)  # type: ignore[arg-type]
    assert [d.train for d in adv.dispositions] == [True, False, False]
    assert [d.label for d in adv.dispositions][1:] == [ZERO_VARIANCE, SURPLUS]
    assert len(adv.datums) == 2 and [d.tokens[0] for d in adv.datums] == [ord("a")] * 2
    # the step's reward counts every sampled completion; the reward ties every sampled group
    assert adv.correct == 4 and adv.total == 6 and adv.metrics["reward_uniform_groups"] == 1.0


def test_advantages_leave_the_rollouts_untouched() -> None:
    backend = ScriptedBackend({"a": ["y", "n" * 12], "b": ["y", "y"], "c": ["n", "y"]}, max_tokens=12)
    f = flow_of(config(group_size=2, overlong_buffer=4, mask_truncated_completions=True, batch_advantage_norm=True))
    rollouts = collect(backend, f, batch_of(backend, ["a", "b", "c"]), group_size=2)
    rollouts.groups = select(rollouts.groups, 1)
    before = pickle.dumps(rollouts)
    pure = step_advantages(f, rollouts, backend, step=0, adv_clip_max=0.0)  # type: ignore[arg-type]
    assert pickle.dumps(rollouts) == before and not f.sepa.gate_open  # nor the SEPA controller
    adv = advantages(f, rollouts, backend, step=0, adv_clip_max=0.0)  # type: ignore[arg-type]
    assert pickle.dumps(rollouts) == before
    # which groups train is in the result; `advantages` then feeds the step to SEPA (4 of 6 right)
    assert [d.train for d in adv.dispositions] == [True, False, False] and adv.dispositions == pure.dispositions
    assert adv.datums == pure.datums and adv.metrics == pure.metrics and f.sepa.gate_open


def test_totals_survive_the_state_file_and_reach_the_summary(tmp_path: Path) -> None:
    state = TrainerState()
    state.dynamic_sampling.add(FillReport(4, 10, 5, 1, 2))
    state.dynamic_sampling.add(FillReport(4, 6, 4, 0, 2))
    write_state(tmp_path, state)
    back = read_state(tmp_path).dynamic_sampling
    assert back.summary() == {"groups": 16, "dropped": 9, "surplus": 1, "extra_rounds": 4, "short_steps": 1}
    lines = summary_lines({"condition": "c", "steps": 2, "dynamic_sampling": back.summary()})
    assert "  dynamic sampling: 9 of 16 groups dropped (56.2%), 4 extra rounds, 1 surplus groups, " \
           "1 steps short of a full batch" in lines
    row = {"dynamic/groups_sampled": 6.0, "dynamic/groups_dropped": 4.0, "dynamic/extra_rounds": 2.0,
           "dynamic/batch_fill": 0.5}
    assert step_line(3, row).endswith(" dropped=4/6 rounds=+2 fill=0.50")


# -- the keys ------------------------------------------------------------------------------

def errors(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [i.render() for i in info.value.issues]


def warnings(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return [w.render() for w in load_config(path).warnings]


def test_the_keys_load_and_their_bad_values_are_named(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text("[training]\nmax_tokens = 64\ndynamic_sampling = true\n"
                                     "dynamic_sampling_max_rounds = 2\noverlong_buffer = 16\n"
                                     "overlong_penalty_factor = 0.5\nmask_truncated_completions = true\n")
    t = load_config(tmp_path / "c.toml").config.training
    assert (t.dynamic_sampling, t.dynamic_sampling_max_rounds, t.overlong_buffer, t.overlong_penalty_factor,
            t.mask_truncated_completions) == (True, 2, 16, 0.5, True)
    cases = {
        "[training]\nmax_tokens = 8\noverlong_buffer = 9\n": "[training] overlong_buffer: 9 must be <= max_tokens (8)",
        "[training]\noverlong_buffer = -1\n": "[training] overlong_buffer: -1",
        "[training]\ndynamic_sampling = true\ndynamic_sampling_max_rounds = 0\n":
            "[training] dynamic_sampling_max_rounds: 0",
        "[training]\noverlong_buffer = 4\noverlong_penalty_factor = 0\n": "[training] overlong_penalty_factor: 0",
        "[training]\ntrainer = 'ttt_discover'\ndynamic_sampling = true\n": "[training] dynamic_sampling: TTT-Discover",
        "[training]\ntrainer = 'sft'\nsft_data_path = 'd.jsonl'\nmask_truncated_completions = true\n":
            "[training] mask_truncated_completions: is read by the RL trainers, not trainer = 'sft'",
        "[environment]\nprovider = 'openenv'\nid = 'http://127.0.0.1:1'\n[training]\noverlong_buffer = 4\n":
            "[training] overlong_buffer: the overlong penalty of multi-turn episodes is not built yet",
        "[environment]\nprovider = 'openenv'\nid = 'http://127.0.0.1:1'\n[training]\ntl_grpo = true\n"
        "dynamic_sampling = true\n": "[training] dynamic_sampling: cannot run with TL-GRPO",
    }
    for text, message in cases.items():
        found = errors(tmp_path, text)
        assert any(message in e for e in found), (message, found)


def test_tuning_keys_of_a_feature_left_off_warn_by_name(tmp_path: Path) -> None:
    found = warnings(tmp_path, "[training]\ndynamic_sampling_max_rounds = 2\noverlong_penalty_factor = 0.5\n")
    assert any(re.search(r"\[training\] dynamic_sampling_max_rounds: not read: dynamic sampling is off", w)
               for w in found), found
    assert any("[training] overlong_penalty_factor: not read: the overlong penalty is off" in w for w in found)
    assert not warnings(tmp_path, "[training]\ndynamic_sampling = true\ndynamic_sampling_max_rounds = 2\n")
