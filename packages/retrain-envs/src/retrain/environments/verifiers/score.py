"""Score retrain's own completions with a verifiers task's rewards and metrics: a `vf.Trace`
built by hand (the prompt's messages, then the completion as the one sampled assistant
message) and `task.score(trace)` without a runtime, every completion of a step concurrently
up to `[environment] rollout_env_workers`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from retrain.environments.concurrency import EnvClock, bounded
from retrain.environments.verifiers.prompt import messages


@dataclass
class Scores:
    rewards: list[float]
    parts: list[dict[str, float]] = field(default_factory=list)  # per completion: env/reward/*, env/metric/*

    def metrics(self) -> dict[str, float]:
        """Each reward's and metric's mean over the step's completions."""
        names = sorted({k for p in self.parts for k in p})
        return {k: float(np.mean([p[k] for p in self.parts if k in p])) for k in names}


def trace(task: Any, completion: str) -> Any:
    import verifiers.v1 as vf
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, TraceTask

    kinds = {"system": vf.SystemMessage, "user": vf.UserMessage, "assistant": vf.AssistantMessage}
    nodes: list[Any] = []
    for m in messages(task):
        nodes.append(MessageNode(parent=len(nodes) - 1 if nodes else None,
                                 message=kinds.get(m["role"], vf.UserMessage)(content=m["content"])))
    nodes.append(MessageNode(parent=len(nodes) - 1 if nodes else None,
                             message=vf.AssistantMessage(content=completion), sampled=True))
    return vf.Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                    agent=AgentInfo(config=vf.AgentConfig()), nodes=nodes)


def score(pairs: Sequence[tuple[Any, str]], workers: int, clock: EnvClock) -> Scores:
    """(task, completion) pairs to their rewards (the trace's weighted sum) and parts."""

    async def one(pair: tuple[Any, str]) -> Any:
        task, text = pair
        tr = trace(task, text)
        await clock.timed(task.score(tr))
        return tr

    traces = asyncio.run(bounded(pairs, one, workers))
    rewards = [float(tr.reward) if tr.reward is not None else 0.0 for tr in traces]
    parts = [{**{f"env/reward/{k}": float(r.score) for k, r in tr.rewards.items() if r.score is not None},
              **{f"env/metric/{k}": float(v) for k, v in tr.metrics.items() if v is not None}}
             for tr in traces]
    return Scores(rewards, parts)
