"""Sample and score one step's groups, turn rewards into token advantages, build datums.

The order follows spec algorithms.md §1: reward ties decide which groups train; the pipeline
gives token advantages per kept group (with the step's SEPA lambda); then, over the whole
step, REINFORCE++ batch normalisation, the teacher's term when `[teacher]` distils
(retrain.advantages.teacher; a group whose rewards tie still trains on it) and the
advantage cap. DAPO's additions
(retrain.training.dapo): the overlong penalty is added to the rewards as they are
collected, so it takes part in the ties; a group dynamic sampling left out of the batch
(`Group.dropped`) does not train; a truncated completion, with `mask_truncated_completions`,
keeps its place in its group's advantages and trains no token. The rollouts are left as they
are: which groups trained, and why the others did not, is in `StepAdvantages.dispositions`.

With an environment (`flow.environment`) the environment samples and scores; a multi-turn
group carries its `Episode`s, whose sampled tokens the pipeline scores like one completion
each and which become datums with the environment's tokens masked out
(retrain.rollout.episode), plus ECHO weights when `[echo]` is on.

`Group`, `StepRollouts` and `sample_texts`, what environments build and call, live one floor
down in retrain.rollout (retrain.training.rollouts keeps their old import path for plugins).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from retrain.advantages.episode import batch_normalize
from retrain.advantages.result import GroupAdvantages, merge_metrics
from retrain.advantages.teacher import teacher_advantages
from retrain.backends.protocol import TrainBackend
from retrain.planning.create import masks as planning_masks
from retrain.process.spans import span
from retrain.rewards.create import score_answers
from retrain.rollout.group import Group, StepRollouts
from retrain.rollout.sample import sample_texts
from retrain.training.dapo.overlong import masked, shaping_metrics
from retrain.training.distill import teacher_rows_of
from retrain.training.echo import echo_weights
from retrain.training.flow import Flow
from retrain.training.signals import (
    Disposition,
    RewardTies,
    apply_advantage_cap,
    correct_count,
    group_disposition,
    summarize_reward_ties,
    tie_metrics,
)
from retrain.types import Completion, Datum, Example, SamplingParams, TrainOutput


def collect(backend: TrainBackend, flow: Flow, batch: Sequence[tuple[Example, list[int]]], *,
            group_size: int, sampling: SamplingParams | None = None) -> StepRollouts:
    out: StepRollouts
    if flow.environment is not None:
        out = flow.environment.collect(backend, batch, group_size=group_size, sampling=sampling or flow.sampling)
    else:
        samples, texts, sample_s = sample_texts(backend, batch, group_size, sampling or flow.sampling)
        with span("score") as scoring:
            responses = [t for group in texts for t in group]
            references = [ex.reference for ex, _ in batch for _ in range(group_size)]
            prompts = [ex.prompt for ex, _ in batch for _ in range(group_size)]
            scored = score_answers(flow.reward, responses, references, prompts)
            scores = np.asarray(scored.scores, dtype=np.float64)
            groups = [Group(ex, ids, list(comps), txts, scores[i * group_size:(i + 1) * group_size])
                      for i, ((ex, ids), comps, txts) in enumerate(zip(batch, samples, texts, strict=True))]
        out = StepRollouts(groups, sample_s, scoring.seconds, scored.metrics(), reward_faults=scored.faults)
    if flow.overlong is not None:
        out.groups = flow.overlong.shape(out.groups)
    return out


@dataclass
class StepAdvantages:
    datums: list[Datum]
    metrics: dict[str, float]
    correct: int
    total: int
    sepa: dict[str, float] = field(default_factory=dict)  # the lambda this step used, the gate then
    # one per group of the step, in order: whether it trains, and the console note on why not
    dispositions: list[Disposition] = field(default_factory=list)

    @cached_property
    def informative(self) -> int:
        """Tokens with a non-zero advantage: the tokens the update trains on."""
        return nonzero_action_tokens(self.datums)


Kept = tuple[Group, list[int]]  # a group that trains, and its members (completion indices)


def advantages(flow: Flow, rollouts: StepRollouts, backend: TrainBackend, *, step: int, adv_clip_max: float,
               tl_grpo: bool = False) -> StepAdvantages:
    """`step_advantages`, then the step's observations fed to the SEPA controller
    (`observe_sepa`): the loop's entry point. `rollouts` is left as it is."""
    adv = step_advantages(flow, rollouts, backend, step=step, adv_clip_max=adv_clip_max, tl_grpo=tl_grpo)
    observe_sepa(flow, rollouts, adv)
    return adv


def step_advantages(flow: Flow, rollouts: StepRollouts, backend: TrainBackend, *, step: int,
                    adv_clip_max: float, tl_grpo: bool = False) -> StepAdvantages:
    """One step's token advantages and train datums, with its metrics; `flow` and `rollouts`
    are left as they are. `step` is the global step (warmup steps included), as SEPA's
    schedule defines it; the lambda is the controller's before this step's observations."""
    sepa = flow.sepa.metrics(step)
    sepa_lambda = sepa["sepa_lambda"] if flow.pipeline.uses_sepa_controller else 0.0
    ties, dispositions, kept = _select(flow, rollouts.groups, tl_grpo)
    results, planning = _group_advantages(flow, backend, kept, sepa_lambda=sepa_lambda, step=step)
    rewards = rollouts.rewards  # (completions,) over every group, dropped ones included
    correct, total = correct_count(rewards), int(rewards.shape[0])
    metrics = {**tie_metrics(ties), **merge_metrics(results), **shaping_metrics(rollouts.groups), **planning}
    adv_C_T = [row for r in results for row in r.completions()]  # kept completions x their tokens
    if flow.pipeline.batch_normalize:
        adv_C_T, norm = batch_normalize(adv_C_T)
        metrics.update(norm)
    if flow.distill is not None:
        student_C_T = [g.completions[i].logprobs for g, members in kept for i in members]
        teacher_C_T = [row for g, members in kept for row in teacher_rows_of(g, members)]
        adv_C_T, distilled = teacher_advantages(adv_C_T, student_C_T, teacher_C_T, flow.distill)
        metrics.update(distilled)
    adv_C_T, cap = apply_advantage_cap(adv_C_T, adv_clip_max)
    metrics.update(cap)
    echo = _echo(flow, kept)
    if echo is not None:
        metrics.update(echo[1])
    datums, truncated = _datums(flow, kept, adv_C_T, echo[0] if echo is not None else None,
                                policy_version=rollouts.policy_version)
    metrics.update(truncated)
    return StepAdvantages(datums, metrics, correct, total, sepa, dispositions)


def observe_sepa(flow: Flow, rollouts: StepRollouts, adv: StepAdvantages) -> None:
    """Feed one step to the SEPA controller once its lambda was used: the correct rate over
    every completion (the gate) and, on the auto schedule, the completions' logprobs."""
    flow.sepa.observe_correct_rate(adv.correct / adv.total if adv.total else 0.0)
    if flow.sepa.schedule == "auto":
        flow.sepa.observe_completions([c.logprobs for g in rollouts.groups for c in g.completions])


def _select(flow: Flow, groups: Sequence[Group], tl_grpo: bool
            ) -> tuple[list[RewardTies], list[Disposition], list[Kept]]:
    """Every group's reward ties (dropped groups included) and disposition; the groups that train."""
    plugin = flow.pipeline.episode_source != "builtin"
    ties: list[RewardTies] = []
    dispositions: list[Disposition] = []
    kept: list[Kept] = []
    for g in groups:
        members = _members(g, tl_grpo)
        rewards = g.shaped_rewards[members]
        t = summarize_reward_ties(rewards)
        ties.append(t)
        if g.dropped:
            dispositions.append(Disposition(False, g.dropped))
            continue
        disp = group_disposition(t, rewards, tl_grpo=tl_grpo, echo=flow.echo is not None and g.episodes is not None,
                                 plugin_advantage=plugin, teacher=flow.distill is not None)
        dispositions.append(Disposition(disp.train and len(members) > 0, disp.label))
        if dispositions[-1].train:
            kept.append((g, members))
    return ties, dispositions, kept


def _group_advantages(flow: Flow, backend: TrainBackend, kept: Sequence[Kept], *, sepa_lambda: float,
                      step: int) -> tuple[list[GroupAdvantages], dict[str, float]]:
    """The pipeline's advantages for each kept group, and `planning_token_fraction` when a
    planning detector is on."""
    results: list[GroupAdvantages] = []
    marked = seen = 0  # tokens the detector marked, tokens of the completions it saw
    for g, members in kept:
        comps = [g.completions[i] for i in members]
        lp_C_T = [np.asarray(c.logprobs, dtype=np.float64) for c in comps]
        masks = None
        if flow.detector is not None:
            masks = planning_masks(flow.detector, [backend.tokenizer.token_strings(c.token_ids) for c in comps])
            marked += sum(int(m.sum()) for m in masks)
            seen += sum(len(m) for m in masks)
        entropies = [_entropies(c) for c in comps] if flow.pipeline.needs_entropies else None
        results.append(flow.pipeline.compute_group(g.shaped_rewards[members], lp_C_T, planning_masks=masks,
                                                   entropies=entropies, sepa_lambda=sepa_lambda, step=step))
    if flow.detector is None:
        return results, {}
    return results, {"planning_token_fraction": marked / seen if seen else 0.0}


def _datums(flow: Flow, kept: Sequence[Kept], adv_C_T: Sequence[np.ndarray],
            echo: list[list[list[list[float]]]] | None, *, policy_version: int
            ) -> tuple[list[Datum], dict[str, float]]:
    """The kept completions' datums (an episode's: one per segment), in order, given their
    token advantages `adv_C_T` in the same order; with `mask_truncated`, a completion cut at
    max_tokens trains no token, and the metrics count them."""
    datums: list[Datum] = []
    masked_completions = masked_tokens = 0
    advs = iter(adv_C_T)
    for k, (g, members) in enumerate(kept):
        pad = [0.0] * len(g.prompt_ids)
        for j, i in enumerate(members):
            adv = next(advs)
            c = g.completions[i]
            if g.episodes is not None:
                made = g.episodes[i].datums(adv, policy_version=policy_version,
                                            echo=echo[k][j] if echo is not None else None)
            else:
                made = [Datum(tokens=g.prompt_ids + c.token_ids, logprobs=pad + list(c.logprobs),
                              advantages=pad + adv.tolist(), policy_version=policy_version,
                              mask=[0] * len(g.prompt_ids) + [1] * len(c.token_ids), routes=c.routes)]
            if flow.mask_truncated and c.finish_reason == "length":
                made = [masked(d) for d in made]
                masked_completions += 1
                masked_tokens += len(c.token_ids)
            datums += made
    if not flow.mask_truncated:
        return datums, {}
    return datums, {"overlong/masked_completions": float(masked_completions),
                    "overlong/masked_tokens": float(masked_tokens)}


def _members(g: Group, tl_grpo: bool) -> list[int]:
    """The completions that form the group's advantages. Under TL-GRPO an episode retrain cut
    short is left out (its reward still counts toward the correct rate): its turns have no
    branch rewards to compare against (spec algorithms.md §12)."""
    if tl_grpo and g.episodes is not None:
        return [i for i, e in enumerate(g.episodes) if not e.truncated]
    return list(range(len(g.completions)))


def _echo(flow: Flow, kept: Sequence[Kept]
          ) -> tuple[list[list[list[list[float]]]], dict[str, float]] | None:
    """ECHO weights per kept group, per member episode, per segment (None: ECHO off or no
    multi-turn group)."""
    if flow.echo is None or not any(g.episodes is not None for g, _ in kept):
        return None
    episodes = [g.episodes[i] for g, members in kept if g.episodes is not None for i in members]
    sampled = [lp for g, members in kept for i in members for lp in g.completions[i].logprobs]
    flat, metrics = echo_weights(flow.echo, episodes, sampled)
    it = iter(flat)
    return [[next(it) for _ in members] if g.episodes is not None else [] for g, members in kept], metrics


def _entropies(c: Completion) -> np.ndarray:
    if c.entropies is None or len(c.entropies) != len(c.token_ids):
        raise RuntimeError("the backend returned no per-token entropies although the sampling parameters asked "
                           "for them (want_entropy); it breaks the TrainBackend.sample contract")
    return np.asarray(c.entropies, dtype=np.float64)


def nonzero_action_tokens(datums: Sequence[Datum]) -> int:
    return sum(sum(1 for a in d.advantages[1:] if a != 0.0) for d in datums)


def train_on(backend: TrainBackend, adv: StepAdvantages, lr: float, weight_decay: float) -> TrainOutput | None:
    """One optimizer update, timed as the step's `train` span; None (no update, no span) when
    no datum has a token with a non-zero advantage or an ECHO weight."""
    if not adv.informative and not any(d.echo_weights for d in adv.datums):
        return None
    with span("train"):
        return backend.train_step(adv.datums, lr, weight_decay)
