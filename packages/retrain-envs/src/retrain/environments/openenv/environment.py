"""The OpenEnv provider's `Environment` (retrain.environments.protocol): multi-turn episodes
against an OpenEnv server, one WebSocket session per episode.

A step plays its episodes in waves of `[environment] rollout_buffer_size` (0: one group) that
advance turn by turn together: the policy samples every active episode's next action in one
backend call, then the environment steps all of them concurrently, at most
`rollout_env_workers` calls in flight. A malformed action (not parseable against the action
schema, or refused by the server's validation) gets the corrective user message and reward 0
for that turn; the episode goes on. An episode ends when the server says done, or retrain
cuts it (`max_turns`, the action hit max_tokens unless `args.send_token_limited_actions`, the
next prompt would exceed `args.context_window`; reward 0). An episode whose session still fails after its retries is
dropped; a group keeps training while at least two of its episodes remain.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from retrain.backends.protocol import ChatTokenizer, Tokenizer, TrainBackend
from retrain.config.schema import TrainConfig
from retrain.environments.chat import chat_tokenizer, observation_ids, prompt_ids
from retrain.environments.concurrency import EnvClock, bounded
from retrain.environments.openenv.actions import ActionParseError, corrective_message, parse_action
from retrain.environments.openenv.client import OpenEnvServerError, fetch_schema, reachable
from retrain.environments.openenv.episode import Connection, LiveEpisode, TurnLog
from retrain.environments.openenv.render import action_schema_for_prompt, render
from retrain.environments.openenv.settings import OpenEnvSettings, parse
from retrain.environments.openenv.tl_grpo import TLGRPO
from retrain.errors import UserError
from retrain.rollout.episode import Segment, episode_metrics
from retrain.rollout.group import Group, StepRollouts
from retrain.rollout.stitch import prefix_overlap
from retrain.types import Completion, Example, SamplingParams


class OpenEnvEnvironment:
    def __init__(self, settings: OpenEnvSettings, schema: dict[str, Any], examples: list[Example],
                 tl_grpo: TLGRPO | None = None) -> None:
        self.s = settings
        self.schema = schema
        self.prompt_schema = action_schema_for_prompt(schema)
        self._examples = examples
        self.tl_grpo = tl_grpo
        self._tok: ChatTokenizer | None = None

    # the Environment contract ------------------------------------------------------------
    def examples(self) -> Sequence[Example]:
        return self._examples

    def encode(self, example: Example, tokenizer: Tokenizer) -> list[int]:
        return prompt_ids(chat_tokenizer(tokenizer), [{"role": "user", "content": example.prompt}])

    def open(self, backend: TrainBackend) -> None:
        self._tok = chat_tokenizer(backend.tokenizer)

    def state(self) -> dict[str, Any]:
        return self.tl_grpo.state() if self.tl_grpo is not None else {}

    def load_state(self, state: Mapping[str, Any]) -> None:
        if self.tl_grpo is not None:
            self.tl_grpo.load_state(state)

    def close(self) -> None:
        return None

    def collect(self, backend: TrainBackend, batch: Sequence[tuple[Example, list[int]]], *, group_size: int,
                sampling: SamplingParams) -> StepRollouts:
        return asyncio.run(self._collect(backend, batch, group_size, sampling))

    # one step ----------------------------------------------------------------------------
    async def _collect(self, backend: TrainBackend, batch: Sequence[tuple[Example, list[int]]], group_size: int,
                       sampling: SamplingParams) -> StepRollouts:
        t0 = time.perf_counter()
        tok = self._tok or chat_tokenizer(backend.tokenizer)
        clock = EnvClock()
        conn = Connection(self.s, clock)
        episodes = [LiveEpisode(group=g, seed=int((ex.info or {})["seed"]),
                                messages=[{"role": "user", "content": ex.prompt}], prompt=list(ids))
                    for g, (ex, ids) in enumerate(batch) for _ in range(group_size)]
        wave = self.s.buffer or group_size
        sample_s = 0.0
        for i in range(0, len(episodes), wave):
            sample_s += await self._play(backend, tok, conn, episodes[i:i + wave], sampling)
        groups, lives, dropped_groups = self._groups(batch, episodes, group_size)
        branch: dict[str, float] = {}
        if self.tl_grpo is not None:
            branch = await self.tl_grpo.apply(backend, self, conn, groups, lives, sampling)
        metrics = {
            **episode_metrics([e for g in groups for e in g.episodes or ()],
                              dropped=sum(bool(e.failure) for e in episodes)),
            "env/dropped_groups": float(dropped_groups),
            "env/malformed_actions": float(sum(e.malformed for e in episodes)),
            "env/server_validation_errors": float(sum(e.validation_errors for e in episodes)),
            "env/retries": float(sum(e.retries for e in episodes)),
            "env/reward/episodic": float(np.mean([e.reward() for e in episodes if not e.failure] or [0.0])),
            "env/env_s": round(clock.busy_s, 6), "env/env_wall_s": round(clock.wall_s, 6),
            **branch,
        }
        total = time.perf_counter() - t0
        return StepRollouts(groups, sample_s, max(total - sample_s, 0.0), env_metrics=metrics)

    async def _play(self, backend: TrainBackend, tok: ChatTokenizer, conn: Connection, wave: list[LiveEpisode],
                    sampling: SamplingParams) -> float:
        """Play a wave of episodes to their ends; the seconds spent sampling."""
        await bounded(wave, lambda ep: self._open(ep, conn), self.s.workers)
        sample_s = 0.0
        try:
            while True:
                active = [ep for ep in wave if ep.active]
                for ep in active:
                    if 0 < self.s.max_turns <= ep.turns:
                        ep.truncated = "max_turns"
                    elif self.s.context_window and len(ep.prompt) + sampling.max_tokens > self.s.context_window:
                        ep.truncated = "context_window"
                active = [ep for ep in active if ep.active]
                if not active:
                    return sample_s
                t0 = time.perf_counter()
                completions = sample_active(backend, [ep.prompt for ep in active], sampling)
                sample_s += time.perf_counter() - t0
                await bounded(list(zip(active, completions, strict=True)),
                              lambda pair: self._turn(tok, conn, *pair), self.s.workers)
        finally:
            await asyncio.gather(*(conn.close(ep) for ep in wave))

    async def _open(self, ep: LiveEpisode, conn: Connection) -> None:
        try:
            ep.observation = (await conn.call(ep, None)).observation
        except (ConnectionError, OpenEnvServerError) as e:
            ep.failure = str(e) or type(e).__name__

    async def _turn(self, tok: ChatTokenizer, conn: Connection, ep: LiveEpisode, c: Completion) -> None:
        text = tok.decode(c.token_ids)
        ep.add_turn(c.token_ids, c.logprobs, c.finish_reason)
        log = TurnLog(None, 0.0, list(ep.prompt), ep.observation, len(ep.actions))
        ep.log.append(log)
        if c.finish_reason == "length" and not self.s.send_token_limited_actions:
            ep.truncated = "action_token_limit"
            return
        try:
            action: dict[str, Any] | None = parse_action(text, self.schema)
        except ActionParseError:
            action = None
        reward, reply = 0.0, ""
        if action is None:
            ep.malformed += 1
            reply = corrective_message(self.prompt_schema)
        else:
            try:
                result = await conn.call(ep, lambda session: session.step(action))
            except OpenEnvServerError as e:
                if e.code != "VALIDATION_ERROR":
                    ep.failure = str(e)
                    return
                ep.malformed += 1
                ep.validation_errors += 1
                reply, action = corrective_message(self.prompt_schema, str(e)), None
            except ConnectionError as e:
                ep.failure = str(e)
                return
            else:
                ep.actions.append(action)
                reward = result.reward or 0.0
                ep.done = result.done
                ep.observation = result.observation
                reply = render(self.s.renderer, result.observation, context="step", action_schema=self.prompt_schema,
                               seed=ep.seed)
        log.action, log.reward = action, reward
        new = [{"role": "user", "content": reply}]
        obs = observation_ids(tok, ep.messages, text, c.token_ids, new, generation_prompt=not ep.done)
        ep.messages += [{"role": "assistant", "content": text}, *new]
        if obs is None:
            if self.s.require_bridge:
                raise RuntimeError("the chat template does not extend the conversation exactly, so the observation "
                                   "tokens cannot be bridged ([echo] require_live_observation_bridge = true)")
            row = ep.prompt + list(c.token_ids)  # the segment's stream so far
            ep.prompt = prompt_ids(tok, ep.messages)
            ep.segments.append(Segment(prompt_ids=list(ep.prompt), overlap=prefix_overlap(row, ep.prompt)))
            return
        ep.pending = obs
        ep.prompt = ep.prompt + list(c.token_ids) + obs

    def _groups(self, batch: Sequence[tuple[Example, list[int]]], episodes: list[LiveEpisode],
                group_size: int) -> tuple[list[Group], list[list[LiveEpisode]], int]:
        groups: list[Group] = []
        lives: list[list[LiveEpisode]] = []
        dropped = 0
        need = min(2, group_size)
        last = ""
        for g, (ex, ids) in enumerate(batch):
            members = [e for e in episodes if e.group == g]
            last = next((e.failure for e in members if e.failure), last)
            kept = [e for e in members if not e.failure]
            if len(kept) < need:
                dropped += 1
                continue
            eps = [e.episode() for e in kept]
            comps = [ep.completion() for ep in eps]
            groups.append(Group(ex, list(ids), comps, [ep.text for ep in eps],
                                np.asarray([e.reward() for e in kept], dtype=np.float64), episodes=eps))
            lives.append(kept)
        if not groups:
            raise UserError(f"OpenEnv server {self.s.base}: every group of this step lost its episodes ({last})",
                            hint="check the server; [environment] args.retries and message_timeout_s bound the waits")
        return groups, lives, dropped


def sample_active(backend: TrainBackend, prompts: list[list[int]], sampling: SamplingParams) -> list[Completion]:
    """One completion per prompt, in one backend call: identical prompts (a group's first
    turn) are sampled together as one prompt with several samples."""
    order: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(prompts):
        order.setdefault(tuple(p), []).append(i)
    counts = {len(v) for v in order.values()}
    out: list[Completion | None] = [None] * len(prompts)
    if len(counts) == 1 and len(order) < len(prompts):
        n = counts.pop()
        for (_, idx), comps in zip(order.items(), backend.sample([list(k) for k in order], n, sampling), strict=True):
            for i, c in zip(idx, comps, strict=True):
                out[i] = c
    else:
        for i, comps in enumerate(backend.sample(prompts, 1, sampling)):
            out[i] = comps[0]
    return [c for c in out if c is not None]


async def _reset_prompts(s: OpenEnvSettings, schema: dict[str, Any]) -> list[str]:
    from retrain.environments.openenv.client import OpenEnvSession

    session = OpenEnvSession(s.base, connect_timeout_s=s.connect_timeout_s, message_timeout_s=s.message_timeout_s)
    await session.connect()
    try:
        out = []
        for seed in range(s.seed, s.seed + s.num_examples):
            first = await session.reset(seed=seed)
            out.append(render(s.renderer, first.observation, context="reset", action_schema=schema, seed=seed))
        return out
    finally:
        await session.close()


def create_environment(config: TrainConfig) -> OpenEnvEnvironment:
    s = parse(config)
    why = reachable(s.base, s.connect_timeout_s)
    if why:
        raise UserError(f"OpenEnv server {s.base} is unreachable ({why})",
                        hint="start the server, or fix [environment] id")
    try:
        schema = fetch_schema(s.base, s.connect_timeout_s)["action"]
        prompts = asyncio.run(_reset_prompts(s, action_schema_for_prompt(schema)))
    except (OSError, ConnectionError, RuntimeError, ValueError) as e:
        raise UserError(f"OpenEnv server {s.base}: {e}") from None
    examples = [Example(prompt=p, task="openenv", info={"seed": seed}, example_id=seed)
                for seed, p in zip(range(s.seed, s.seed + s.num_examples), prompts, strict=True)]
    return OpenEnvEnvironment(s, schema, examples, TLGRPO.of(config))
