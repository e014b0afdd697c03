"""TL-GRPO (spec algorithms.md §12): turn-level advantages from branch rewards.

For every turn of an episode that finished on its own (retrain's truncations are left out of
the group), the primary reward is the reward of the turn's action plus that of up to
`tl_grpo_lookahead_steps` following actions of the episode. `tl_grpo_branch_size - 1`
alternative actions are scored the same way in fresh sessions: reset with the episode's seed,
replay the actions accepted before the turn, send the alternative, then continue with the
episode's own next actions (an alternative that fails or does not parse scores 0).
Alternatives come from the observation's `legal_actions` list (`action_space`, a random sample
without the primary) or from the policy, sampled again from the turn's prompt (`llm`).

turn advantage = (primary - mean) / (std + 1e-8) over [primary, *alternatives] (population
std) + 0.5 * outcome advantage, where outcome = episode reward - EMA baseline; a turn with no
alternatives (malformed, or no legal actions) gets 0.5 * outcome. After each group the
baseline takes every kept episode's reward in order: ema = d * ema + (1 - d) * r. The
baseline is saved in checkpoints.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from retrain.backends.protocol import TrainBackend
from retrain.config.schema import TrainConfig
from retrain.environments.concurrency import bounded
from retrain.environments.openenv.actions import ActionParseError, parse_action
from retrain.environments.openenv.client import OpenEnvSession
from retrain.environments.openenv.episode import Connection, LiveEpisode
from retrain.environments.openenv.settings import OpenEnvSettings
from retrain.rollout.group import Group
from retrain.types import SamplingParams


class Host(Protocol):
    """What branching reads of the environment it serves (an OpenEnvEnvironment): the
    server settings and the action schema."""

    s: OpenEnvSettings
    schema: dict[str, Any]

TURN_WEIGHT = 0.5


def turn_advantages(branches: Sequence[Sequence[float]], outcome: float) -> list[float]:
    out = []
    for g in branches:
        if len(g) < 2:
            out.append(TURN_WEIGHT * outcome)
            continue
        a = np.asarray(g, dtype=np.float64)
        out.append(float((a[0] - a.mean()) / (a.std() + 1e-8) + TURN_WEIGHT * outcome))
    return out


class TLGRPO:
    def __init__(self, mode: str, branch_size: int, lookahead: int, decay: float, ema: float, seed: int) -> None:
        self.mode = mode
        self.branch_size = branch_size
        self.lookahead = lookahead
        self.decay = decay
        self.ema = ema
        self.seed = seed
        self.draws = 0  # action_space samples so far: each draws from its own seeded stream

    @classmethod
    def of(cls, config: TrainConfig) -> TLGRPO | None:
        t = config.training
        if not t.tl_grpo:
            return None
        return cls(t.tl_grpo_branch_mode, t.tl_grpo_branch_size, t.tl_grpo_lookahead_steps, t.tl_grpo_ema_decay,
                   t.tl_grpo_ema_init, max(t.seed, 0))

    def state(self) -> dict[str, Any]:
        return {"tl_grpo_ema": self.ema, "tl_grpo_draws": self.draws}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.ema = float(state.get("tl_grpo_ema", self.ema))
        self.draws = int(state.get("tl_grpo_draws", self.draws))

    def _primary(self, ep: LiveEpisode, t: int) -> float:
        return float(sum(x.reward for x in ep.log[t:t + 1 + self.lookahead]))

    def _alternatives(self, backend: TrainBackend, env: Host, ep: LiveEpisode, t: int,
                      sampling: SamplingParams) -> tuple[list[dict[str, Any] | None], bool]:
        """(alternative actions, None where one does not parse; whether any could be made)."""
        turn = ep.log[t]
        k = self.branch_size - 1
        if self.mode == "llm":
            comps = backend.sample([turn.prompt], k, sampling)[0]
            out: list[dict[str, Any] | None] = []
            for c in comps:
                try:
                    out.append(parse_action(backend.tokenizer.decode(c.token_ids), env.schema))
                except ActionParseError:
                    out.append(None)
            return out, True
        obs = turn.observation if isinstance(turn.observation, Mapping) else {}
        legal = [a for a in obs.get("legal_actions") or [] if isinstance(a, Mapping) and a != turn.action]
        if not legal:
            return [], False
        rng = random.Random(f"{self.seed}:{self.draws}")
        self.draws += 1
        return [dict(a) for a in rng.sample(legal, min(k, len(legal)))], True

    async def _score(self, env: Host, conn: Connection, ep: LiveEpisode, t: int,
                     action: dict[str, Any] | None) -> float:
        if action is None:
            return 0.0
        s = env.s
        session = OpenEnvSession(s.base, connect_timeout_s=s.connect_timeout_s, message_timeout_s=s.message_timeout_s)
        try:
            await conn.clock.timed(session.connect())
            await conn.clock.timed(session.reset(seed=ep.seed))
            for a in ep.actions[:ep.log[t].replay]:
                await conn.clock.timed(session.step(a))
            r = await conn.clock.timed(session.step(action))
            total, done = r.reward or 0.0, r.done
            for later in ep.log[t + 1:t + 1 + self.lookahead]:
                if done or later.action is None:
                    break
                r = await conn.clock.timed(session.step(later.action))
                total, done = total + (r.reward or 0.0), r.done
            return float(total)
        except Exception:  # a branch that fails scores 0 (spec §12)
            return 0.0
        finally:
            await session.close()

    async def apply(self, backend: TrainBackend, env: Host, conn: Connection, groups: list[Group],
                    lives: list[list[LiveEpisode]], sampling: SamplingParams) -> dict[str, float]:
        """Set each kept episode's `turn_advantages`; the step's TL-GRPO metrics."""
        probes, no_alternatives, turns = 0, 0, 0
        for group, live in zip(groups, lives, strict=True):
            kept = [i for i, ep in enumerate(live) if not ep.truncated]
            for i in kept:
                ep = live[i]
                branches: list[list[float]] = []
                for t, turn in enumerate(ep.log):
                    turns += 1
                    if turn.action is None:
                        branches.append([turn.reward])
                        continue
                    alts, any_made = self._alternatives(backend, env, ep, t, sampling)
                    no_alternatives += not any_made
                    scored = await bounded(alts, lambda a, ep=ep, t=t: self._score(env, conn, ep, t, a), env.s.workers)
                    probes += len(alts)
                    branches.append([self._primary(ep, t), *scored])
                assert group.episodes is not None
                group.episodes[i].turn_advantages = turn_advantages(branches, ep.reward() - self.ema)
            for i in kept:
                self.ema = self.decay * self.ema + (1 - self.decay) * live[i].reward()
        return {"tl_grpo/ema": self.ema, "tl_grpo/branch_probes": float(probes),
                "tl_grpo/turns_without_alternatives": float(no_alternatives), "tl_grpo/turns": float(turns)}
