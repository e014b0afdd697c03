"""The verifiers provider's multi-turn `Environment`: a taskset whose package exports its own
`vf.Env` plays its episodes with verifiers' own machinery (`Env.run_episode`: the env's
`run()` is the user, the seat's harness program talks to the model), and the model is the
run's policy behind retrain's token-in/token-out endpoint (retrain.environments.verifiers.endpoint)
reached through verifiers' `TrainClient`.

A step runs `group_size` episodes per task, at most `[environment] rollout_env_workers` at
once (each holds one harness process), inside one `Env.serving()`. Each finished episode's
trainable trace becomes a retrain `Episode` (retrain.rollout.episode): its branches
(root-to-leaf token streams; a new one where verifiers could not extend the previous prompt)
are segments, a node two branches share training in the first only; within one, each maximal
run of sampled tokens is a turn and the tokens before it that the policy did not sample (the
env's message, the chat template's tags) its observation. A turn's logprobs, finish reason and entropies are read
from what the endpoint served for exactly that prompt and completion.

The Env judges every reply it gets, one cut by `max_tokens` too, and its reward stands (a
turn that hit `max_tokens` is counted in `env/length_turns`); `[environment] max_turns` caps
each seat's turns and `max_episode_tokens` its tokens (verifiers' `max_turns` and
`max_total_tokens`; such episodes count in `truncated/max_turns`, `/max_episode_tokens`). Each
episode's stop condition is counted (`env/stop/<condition>`). An episode verifiers reports as
failed is dropped; a group trains while at least two of its episodes remain.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from retrain.backends.protocol import Tokenizer, TrainBackend
from retrain.environments.chat import chat_tokenizer, prompt_ids
from retrain.environments.concurrency import EnvClock, bounded
from retrain.environments.verifiers.endpoint import MODEL, PolicyEndpoint, Served
from retrain.environments.verifiers.order import TaskOrder
from retrain.environments.verifiers.prompt import messages
from retrain.errors import UserError
from retrain.rollout.episode import Episode, Segment, Turn, episode_metrics
from retrain.rollout.group import Group, StepRollouts
from retrain.rollout.stitch import prefix_overlap
from retrain.types import Completion, Example, SamplingParams

#: verifiers' stop conditions that are retrain's limits ([environment] max_turns, max_episode_tokens)
TRUNCATED = {"max_turns": "max_turns", "max_total_tokens": "max_episode_tokens"}
KEY_VAR = "RETRAIN_POLICY_ENDPOINT_KEY"  # the env variable verifiers' client reads the endpoint's key from


@dataclass
class Played:
    """One vf episode, as retrain trains on it."""

    group: int
    episode: Episode | None = None
    reward: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)  # env/reward/*, env/metric/*
    failure: str = ""
    stop: str = ""  # the trace's stop condition (verifiers' names: user_closed, max_turns, ...)
    length_turns: int = 0  # turns that hit max_tokens
    unmatched_turns: int = 0


def segments(branch_tokens: Sequence[int], mask: Sequence[bool], logprobs: Sequence[float],
             served: Served) -> tuple[Segment, int]:
    """One branch as a segment, and how many of its turns the endpoint did not serve (their
    logprobs come from the trace, their finish reason is taken as "stop")."""
    tokens = list(branch_tokens)
    first = next((i for i, m in enumerate(mask) if m), len(tokens))
    seg = Segment(prompt_ids=tokens[:first])
    unmatched = 0
    i, prev_end = first, first
    while i < len(tokens):
        if not mask[i]:
            i += 1
            continue
        end = i
        while end < len(tokens) and mask[end]:
            end += 1
        comp = served.by_key.get((tuple(tokens[:i]), tuple(tokens[i:end])))
        if comp is None:
            unmatched += 1
            comp = Completion(token_ids=tokens[i:end], logprobs=[float(x) for x in logprobs[i:end]])
        seg.turns.append(Turn(token_ids=tokens[i:end], logprobs=list(comp.logprobs), observation=tokens[prev_end:i],
                              entropies=comp.entropies, finish_reason=comp.finish_reason))
        prev_end = i = end
    seg.tail = tokens[prev_end:] if seg.turns else []
    return seg, unmatched


def played(group: int, vep: Any, served: Served) -> Played:
    out = Played(group)
    if not vep.ok:
        errors = [*vep.errors, *(e for t in vep.traces for e in t.errors)]
        stops = sorted({str(t.stop_condition) for t in vep.traces if not t.ok})
        out.failure = (f"{errors[0].type}: {errors[0].message}" if errors
                       else f"the episode did not finish (stopped: {', '.join(stops) or 'unknown'})")
        return out
    traces = [t for t in vep.traces if t.agent.trainable]
    if len(traces) != 1:
        raise UserError(f"a verifiers episode had {len(traces)} trainable agent traces; training several agents "
                        "of one episode is not built yet in this version",
                        hint="mark the other seats trainable = False in the Env's setup()")
    trace = traces[0]
    segs: list[Segment] = []
    seen: set[int] = set()  # branches share their common prefix's nodes; each sampled node trains once
    previous: list[int] = []
    for branch in trace.branches:
        if not branch.trainable:
            continue
        mask = [bool(m) and id(node) not in seen for node in branch.nodes for m in node.mask]
        seen.update(id(node) for node in branch.nodes)
        seg, unmatched = segments(branch.token_ids, mask, branch.logprobs, served)
        out.unmatched_turns += unmatched
        if seg.turns:
            if segs:  # a branch where verifiers could not extend the previous one's tokens
                seg.overlap = prefix_overlap(previous, branch.token_ids)
            segs.append(seg)
            previous = list(branch.token_ids)
    if not segs:
        out.failure = "the episode's trace holds no sampled tokens"
        return out
    text = "\n".join(f"[{m.role}] {getattr(m, 'content', '') or ''}" for m in trace.messages)
    out.episode = Episode(segments=segs, truncated=TRUNCATED.get(str(trace.stop_condition), ""), text=text)
    out.reward = float(trace.reward or 0.0)
    out.stop = str(trace.stop_condition or "")
    out.length_turns = sum(t.finish_reason == "length" for t in out.episode.turns)
    out.parts = {**{f"env/reward/{k}": float(r.score) for k, r in trace.rewards.items() if r.score is not None},
                 **{f"env/metric/{k}": float(v) for k, v in trace.metrics.items() if v is not None}}
    return out


class VerifiersEpisodes:
    def __init__(self, taskset_id: str, env: Any, tasks: Sequence[Any], workers: int) -> None:
        self.taskset_id = taskset_id
        self.env = env
        self.order = TaskOrder(taskset_id, tasks)
        self.workers = workers
        self.endpoint: PolicyEndpoint | None = None
        self._tokenizer_dir = ""

    def examples(self) -> Sequence[Example]:
        return self.order.examples

    def encode(self, example: Example, tokenizer: Tokenizer) -> list[int]:
        """The task's own prompt (what the generations log shows); the env's `run()` decides
        what the policy actually sees, which the episode's segments hold."""
        msgs = messages(self.order.task(example)) or [{"role": "user", "content": ""}]
        return prompt_ids(chat_tokenizer(tokenizer), msgs)

    def open(self, backend: TrainBackend) -> None:
        tok = backend.tokenizer
        hf = getattr(tok, "hf", None)
        if hf is None or not hasattr(hf, "save_pretrained"):
            raise UserError(f"verifiers multi-turn environments render prompts with a Hugging Face tokenizer; the "
                            f"backend's is {type(tok).__name__}", hint='backend = "local"')
        self._tokenizer_dir = tempfile.mkdtemp(prefix="retrain-vf-tokenizer-")
        hf.save_pretrained(self._tokenizer_dir)

        def sample(prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
            return [group[0] for group in backend.sample(prompts, 1, params)]

        self.endpoint = PolicyEndpoint(sample, stop_token_ids=list(getattr(tok, "eos_token_ids", [])),
                                       max_model_len=int(getattr(backend, "max_context", 0) or 0))
        self.endpoint.start()
        os.environ[KEY_VAR] = self.endpoint.api_key

    def _context(self, sampling: SamplingParams) -> Any:
        import verifiers.v1 as vf
        from verifiers.v1.clients import ModelContext, TrainClientConfig

        assert self.endpoint is not None
        extra = {k: v for k, v in (("top_k", sampling.top_k), ("min_p", sampling.min_p)) if v}
        return ModelContext(model=MODEL,
                            client=TrainClientConfig(base_url=self.endpoint.url, api_key_var=KEY_VAR,
                                                     renderer_model_name=self._tokenizer_dir),
                            sampling=vf.SamplingConfig(temperature=sampling.temperature, top_p=sampling.top_p,
                                                       max_tokens=sampling.max_tokens, **extra))

    def collect(self, backend: TrainBackend, batch: Sequence[tuple[Example, list[int]]], *, group_size: int,
                sampling: SamplingParams) -> StepRollouts:
        if self.endpoint is None:
            self.open(backend)
        assert self.endpoint is not None
        self.endpoint.base = sampling
        served = self.endpoint.served
        served.clear()
        t0 = time.perf_counter()
        jobs = [(g, self.order.task(ex)) for g, (ex, _) in enumerate(batch) for _ in range(group_size)]
        clock = EnvClock()
        veps = asyncio.run(self._play(jobs, self._context(sampling), clock))
        if served.error is not None:
            raise served.error
        plays = [played(g, vep, served) for (g, _), vep in zip(jobs, veps, strict=True)]
        groups, dropped_groups = self._groups(batch, plays, group_size)
        kept = [p for p in plays if p.episode is not None]
        names = sorted({k for p in kept for k in p.parts})
        metrics = {
            **episode_metrics([e for g in groups for e in g.episodes or ()], dropped=sum(bool(p.failure) for p in plays)),
            **{k: float(np.mean([p.parts[k] for p in kept if k in p.parts])) for k in names},
            **{f"env/stop/{c}": float(sum(p.stop == c for p in kept)) for c in sorted({p.stop for p in kept} - {""})},
            "env/length_turns": float(sum(p.length_turns for p in kept)),
            "env/dropped_groups": float(dropped_groups),
            "env/unmatched_turns": float(sum(p.unmatched_turns for p in plays)),
            "env/policy_requests": float(served.requests),
            "env/policy_batches": float(served.calls),
            # the episodes' wall time less the policy's sampling: the time spent in the env and its harness
            "env/env_wall_s": round(max(clock.wall_s - served.sample_s, 0.0), 6),
            "env/env_s": round(clock.busy_s, 6),
        }
        total = time.perf_counter() - t0
        return StepRollouts(groups, served.sample_s, max(total - served.sample_s, 0.0), env_metrics=metrics)

    async def _play(self, jobs: list[tuple[int, Any]], ctx: Any, clock: EnvClock) -> list[Any]:
        async with self.env.serving():
            return await bounded(jobs, lambda job: clock.timed(self.env.run_episode(job[1], ctx)), self.workers)

    def _groups(self, batch: Sequence[tuple[Example, list[int]]], plays: list[Played],
                group_size: int) -> tuple[list[Group], int]:
        groups: list[Group] = []
        dropped = 0
        last = ""
        for g, (ex, ids) in enumerate(batch):
            members = [p for p in plays if p.group == g]
            last = next((p.failure for p in members if p.failure), last)
            kept = [p for p in members if p.episode is not None]
            if len(kept) < min(2, group_size):
                dropped += 1
                continue
            eps = [p.episode for p in kept if p.episode is not None]
            groups.append(Group(self.order.example(ex), list(ids), [e.completion() for e in eps], [e.text for e in eps],
                                np.asarray([p.reward for p in kept], dtype=np.float64), episodes=eps))
        if not groups:
            raise UserError(f"verifiers environment {self.taskset_id!r}: every group of this step lost its episodes "
                            f"({last})", hint="run the taskset with vf-eval to see why its episodes fail")
        return groups, dropped

    def state(self) -> dict[str, Any]:
        return self.order.state()

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.order.load_state(state)

    def close(self) -> None:
        if self.endpoint is not None:
            self.endpoint.stop()
            self.endpoint = None
        os.environ.pop(KEY_VAR, None)
        if self._tokenizer_dir:
            shutil.rmtree(self._tokenizer_dir, ignore_errors=True)
            self._tokenizer_dir = ""
