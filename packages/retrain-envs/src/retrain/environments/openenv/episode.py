"""One OpenEnv episode in flight: its session, its conversation as messages and as tokens
(retrain.rollout.episode), its step rewards, and the retry that keeps it alive.

A dropped connection or a timed-out reply is retried `retries` times with exponential
backoff: a new session resets with the episode's seed and replays the actions the server
accepted so far (the servers are deterministic under a seed), then sends the interrupted call
again. An episode that still fails is dropped (`failure` says why).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from retrain.environments.concurrency import EnvClock
from retrain.environments.openenv.client import OpenEnvDropped, OpenEnvSession, StepResult
from retrain.environments.openenv.settings import OpenEnvSettings
from retrain.rollout.episode import Episode, Segment, Turn


@dataclass
class TurnLog:
    """What TL-GRPO reads of a turn: the action sent (None: malformed or not sent), its reward."""

    action: dict[str, Any] | None
    reward: float
    prompt: list[int] = field(default_factory=list)  # the ids the policy sampled this turn from
    observation: Any = None  # the observation the policy answered
    replay: int = 0  # actions the server had accepted before this turn


@dataclass
class LiveEpisode:
    group: int
    seed: int
    messages: list[dict[str, str]]
    prompt: list[int]
    segments: list[Segment] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)  # the last observation's ids, not yet followed by a turn
    actions: list[dict[str, Any]] = field(default_factory=list)  # accepted by the server, for replay
    log: list[TurnLog] = field(default_factory=list)
    session: OpenEnvSession | None = None
    observation: Any = None  # the latest observation
    done: bool = False
    truncated: str = ""
    failure: str = ""
    malformed: int = 0
    validation_errors: int = 0
    retries: int = 0
    env_s: float = 0.0  # time in this episode's environment calls
    start: int = 0  # messages before the first reply (the prompt)

    def __post_init__(self) -> None:
        self.segments = [Segment(prompt_ids=list(self.prompt))]
        self.start = len(self.messages)

    @property
    def active(self) -> bool:
        return not (self.done or self.truncated or self.failure)

    @property
    def turns(self) -> int:
        return len(self.log)

    def reward(self) -> float:
        """The episodic sum of step rewards; 0 for an episode retrain cut short."""
        return 0.0 if self.truncated else float(sum(t.reward for t in self.log))

    def add_turn(self, ids: list[int], logprobs: list[float], finish: str) -> None:
        self.segments[-1].turns.append(Turn(token_ids=list(ids), logprobs=list(logprobs),
                                            observation=self.pending, finish_reason=finish))
        self.pending = []

    def episode(self) -> Episode:
        if self.pending:
            self.segments[-1].tail = self.pending
            self.pending = []
        text = "\n".join(f"[{m['role']}] {m['content']}" for m in self.messages[self.start:])
        return Episode(segments=self.segments, truncated=self.truncated, env_s=self.env_s, text=text)


class Connection:
    """The step's sessions: opening, calling with retries, closing."""

    def __init__(self, settings: OpenEnvSettings, clock: EnvClock) -> None:
        self.s = settings
        self.clock = clock

    def _reset_kwargs(self, seed: int) -> dict[str, Any]:
        kw: dict[str, Any] = {"seed": seed}
        if self.s.max_turns > 0:
            kw["max_turns"] = self.s.max_turns
        return kw

    async def _fresh(self, ep: LiveEpisode) -> StepResult:
        if ep.session is not None:
            await ep.session.close()
        ep.session = OpenEnvSession(self.s.base, connect_timeout_s=self.s.connect_timeout_s,
                                    message_timeout_s=self.s.message_timeout_s)
        await ep.session.connect()
        first = await ep.session.reset(**self._reset_kwargs(ep.seed))
        for action in ep.actions:
            await ep.session.step(action)
        return first

    async def call(self, ep: LiveEpisode, fn: Callable[[OpenEnvSession], Awaitable[StepResult]] | None) -> StepResult:
        """`fn` on the episode's session (None: open it and reset), retried on drops."""
        attempt = 0
        t0 = time.perf_counter()
        while True:
            try:
                if ep.session is None or fn is None:
                    first = await self.clock.timed(self._fresh(ep))
                    if fn is None:
                        return first
                assert ep.session is not None
                return await self.clock.timed(fn(ep.session))
            except OpenEnvDropped:
                if ep.session is not None:
                    await ep.session.close()
                    ep.session = None
                if attempt >= self.s.retries:
                    raise
                await asyncio.sleep(self.s.retry_backoff_s * 2 ** attempt)
                attempt += 1
                ep.retries += 1
            finally:
                ep.env_s += time.perf_counter() - t0
                t0 = time.perf_counter()

    async def close(self, ep: LiveEpisode) -> None:
        if ep.session is not None:
            await ep.session.close()
            ep.session = None
