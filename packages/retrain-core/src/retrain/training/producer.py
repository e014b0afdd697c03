"""Where a step's rollouts come from: sampled now, or up to `max_async_level` batches ahead.

`max_async_level = 0`: publish the latest weights to the sampler, then sample and score.
`max_async_level = K > 0` (bounded staleness): one background thread samples and scores the
batches in order, up to K ahead of the step that trains, while the trainer trains. Batch j
may start once the weights of step j - K are published, and samples from

- `async_versions = "pinned"`: exactly those, version max(j - K, 0), so batch j depends on
  the run's state K steps earlier and nothing else: the run is reproducible;
- `async_versions = "latest"`: the newest version published when it starts (never older).

Per step the trainer takes batch `step` (waiting for it if it is not done: `async/wait_s`),
publishes its weights as version `step`, the count of RL updates in them
(`async/weight_sync_s`, the step's `sync` span; a backend that holds several versions,
retrain.backends.protocol.VersionedSampler, releases those older than step - K), and trains.
A backend that serves one version at a time (K = 1 only) gets its new weights only once the
batch sampling from the old ones is taken.

Every group carries the version its tokens were sampled from (`Completion.versions` per token
when they differ); a group whose oldest token is more than `max_off_policy_steps` updates
behind the weights that train on it is dropped from the update (kept in the logs, counted in
`async/dropped_samples`), whole, because its members share one baseline.

Resume invariant: the data cursor and the environment's state saved with a checkpoint are
those *before* the first batch in flight (`committed_index`, `checkpoint_flow`), and the
backend's checkpoint keeps the published versions those batches sample from, so a resumed run
samples them again, from the same weights with the same seeds (each batch is named by the
cursor where it starts, `SamplingParams.batch_id`), instead of losing them or training on them
twice. With `pinned` versions and the in-process engine the resumed run is the uninterrupted
one, bit for bit.

With dynamic sampling (retrain.training.dapo.dynamic) a batch is all the rounds that fill it,
sampled one after the other from the same weights by the same thread, the only user of the
data cursor while the run trains.

In a run of several processes whose backend samples on rank 0 alone (an inference server,
retrain.backends.protocol.LeaderSampler), rank 0 samples and scores every batch (its own
thread, with K > 0) and hands it, with the cursor after it, to the other ranks as the step
takes it; every rank publishes, since gathering the weights is a collective.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from retrain.backends.protocol import LeaderSampler, TrainBackend, VersionedSampler
from retrain.process.spans import span
from retrain.process.world import World
from retrain.rollout.group import Group, StepRollouts
from retrain.teacher.protocol import Teacher
from retrain.training.dapo.dynamic import DynamicSampling
from retrain.training.distill import score_groups
from retrain.training.flow import Flow
from retrain.training.prompts import PromptCursor
from retrain.training.step import collect
from retrain.types import Completion, Example


@dataclass
class _Batch:
    """A batch the background thread has started: the version it samples from; once done, its
    rollouts (or the error that stopped it) and where the data cursor and the environment's
    state stood after it."""

    version: int
    done: bool = False
    rollouts: StepRollouts | None = None
    error: BaseException | None = None
    end: int = 0
    environment: Mapping[str, Any] | None = None


class RolloutProducer:
    def __init__(self, backend: TrainBackend, flow: Flow, cursor: PromptCursor, *, level: int, max_steps: int,
                 dynamic: DynamicSampling | None = None, versions: str = "pinned",
                 max_off_policy_steps: int = 0, world: World | None = None,
                 teacher: Teacher | None = None) -> None:
        self.backend, self.flow, self.cursor = backend, flow, cursor
        self.teacher = teacher
        self.level, self.max_steps, self.dynamic = level, max_steps, dynamic
        self.latest = versions == "latest"
        self.max_off_policy = max_off_policy_steps or level
        self.versioned = isinstance(backend, VersionedSampler)
        shared = isinstance(backend, LeaderSampler) and backend.leader_samples
        self.world = world or World()
        self.share = backend.broadcast if shared and isinstance(backend, LeaderSampler) else None
        self.samples = self.share is None or self.world.leader  # this process samples
        self._cond = threading.Condition()
        self._batches: dict[int, _Batch] = {}  # started and not yet taken, by step
        self._published = -1  # the newest version published
        self._sizes = (0, 0)
        self._closed = False
        self._worker: threading.Thread | None = None
        self._committed = cursor.index
        self._committed_env: Mapping[str, Any] | None = None  # None: the environment's own

    @property
    def committed_index(self) -> int:
        """The data cursor after the batches trained so far (those in flight excluded)."""
        return self._committed

    def checkpoint_flow(self, flow: Flow) -> Flow:
        """The flow whose state a checkpoint saves: with batches in flight, the environment's
        state as it was after the last batch trained."""
        env, saved = flow.environment, self._committed_env
        if env is None or saved is None:
            return flow
        return dataclasses.replace(flow, environment=_SavedState(env, saved))

    def next(self, step: int, sizes: tuple[int, int]) -> StepRollouts:
        self._sizes = sizes
        if self.level == 0:
            sync_s = self._publish(step)
            rollouts = self._handed(self._produce(step) if self.samples else None, self.cursor.index, None)
            rollouts.producer_metrics.update({"async/weight_sync_s": round(sync_s, 6),
                                              "async/produce_s": round(rollouts.produce_time_s, 6)})
        else:
            rollouts = self._next_ahead(step)
        rollouts.producer_metrics["async/policy_lag"] = step - rollouts.policy_version
        rollouts.producer_metrics.update(self._stale(rollouts, step))
        return rollouts

    def _next_ahead(self, step: int) -> StepRollouts:
        if self._worker is None and self.samples:
            self._worker = threading.Thread(target=self._work, args=(step,), name="retrain-rollouts", daemon=True)
            self._worker.start()
        # a backend serving one version at a time keeps the old weights until their batch is in
        early = self.versioned or self._published < 0
        sync_s = self._publish(step) if early else 0.0
        t0 = time.perf_counter()
        batch = self._take(step) if self.samples else None
        rollouts = self._handed(batch.rollouts if batch is not None else None, batch.end if batch is not None else 0,
                                batch.environment if batch is not None else None)
        wait_s = time.perf_counter() - t0
        if not early:
            sync_s = self._publish(step)
        rollouts.producer_metrics.update(overlap_metrics(rollouts.produce_time_s, wait_s))
        rollouts.producer_metrics.update({"async/weight_sync_s": round(sync_s, 6),
                                          "async/trainer_idle_s": round(wait_s + sync_s, 6)})
        return rollouts

    def _handed(self, rollouts: StepRollouts | None, end: int,
                environment: Mapping[str, Any] | None) -> StepRollouts:
        """The step's rollouts on every rank (rank 0's, when it alone samples); the cursor and
        the environment's state after them become the committed ones."""
        if self.share is not None:
            rollouts, end, environment = self.share((rollouts, end, environment))
        assert rollouts is not None
        self._committed, self._committed_env = end, environment
        return rollouts

    def _publish(self, version: int) -> float:
        """Make the trained weights version `version` for sampling; the seconds it took."""
        t0 = time.perf_counter()
        with span("sync"):
            if self.versioned:
                self.backend.publish(version, keep=self.level)  # type: ignore[attr-defined]
            else:
                self.backend.checkpoint(f"step_{version}")
        with self._cond:
            self._published = max(self._published, version)
            self._cond.notify_all()
        return time.perf_counter() - t0

    def _take(self, step: int) -> _Batch:
        with self._cond:
            while not ((b := self._batches.get(step)) is not None and b.done):
                if self._worker is None or not self._worker.is_alive():
                    break
                self._cond.wait(timeout=1.0)  # a thread that stopped notifies nobody
            batch = self._batches.pop(step, None)
        if batch is None or not batch.done:
            raise RuntimeError(f"the sampling thread stopped before producing the batch of step {step}")
        if batch.error is not None:
            raise batch.error
        return batch

    def _work(self, first: int) -> None:
        """The background thread: batches `first`, `first` + 1, ... in order, each as soon as
        the version it needs is published."""
        for step in range(first, self.max_steps):
            with self._cond:
                need = max(step - self.level, 0)
                self._cond.wait_for(lambda need=need: self._closed or self._published >= need)  # type: ignore[misc]
                if self._closed:
                    return
                batch = _Batch(self._published if self.latest else need)
                self._batches[step] = batch
            env = self.flow.environment
            try:
                batch.rollouts = self._produce(batch.version)
                batch.end = self.cursor.index
                batch.environment = copy.deepcopy(env.state()) if env is not None else None
            except BaseException as exc:  # handed to the trainer, which raises it at this step
                batch.error = exc
            with self._cond:
                batch.done = True
                self._cond.notify_all()
            if batch.error is not None:
                return

    def _produce(self, version: int) -> StepRollouts:
        """A batch's rollouts from the next prompts of the cursor: `batch_size` of them, and with
        dynamic sampling as many more as filling the batch takes; then the teacher's scores of
        what may train (retrain.training.distill), when the run distils."""
        batch_size, group_size = self._sizes

        def take(n: int) -> StepRollouts:
            start = self.cursor.index
            return self._collect(start, self.cursor.take(n), group_size, version)

        rollouts = take(batch_size)
        if self.dynamic is not None:
            rollouts = self.dynamic.fill(rollouts, batch_size, take)
            if rollouts.fill is not None:
                rollouts.producer_metrics.update(rollouts.fill.metrics())
        if self.teacher is not None:
            score_groups(self.teacher, rollouts)
        return rollouts

    def _collect(self, start: int, batch: Sequence[tuple[Example, list[int]]], group_size: int,
                 version: int) -> StepRollouts:
        named = version if self.versioned else None
        sampling = msgspec.structs.replace(self.flow.sampling, batch_id=start, policy_version=named)
        rollouts = collect(self.backend, self.flow, batch, group_size=group_size, sampling=sampling)
        rollouts.policy_version = version
        return rollouts

    def _stale(self, rollouts: StepRollouts, step: int) -> dict[str, float]:
        """Drop the groups sampled too long ago; the staleness of the step's sampled tokens."""
        if self.level == 0:
            return {}
        lags: list[int] = []
        dropped = 0
        groups: list[Group] = []
        for g in rollouts.groups:
            versions = [v for c in g.completions for v in token_versions(c, rollouts.policy_version)]
            lags += [step - v for v in versions]
            oldest = step - min(versions, default=rollouts.policy_version)
            if oldest > self.max_off_policy and not g.dropped:
                g = dataclasses.replace(g, dropped=f"stale (sampled {oldest} updates behind; max_off_policy_steps "
                                                   f"= {self.max_off_policy})")
                dropped += len(g.completions)
            groups.append(g)
        rollouts.groups = groups
        return {"async/staleness_mean": round(sum(lags) / len(lags), 6) if lags else 0.0,
                "async/staleness_max": float(max(lags, default=0)), "async/dropped_samples": float(dropped)}

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._worker is not None:
            self._worker.join()


class _SavedState:
    """An environment whose `state()` is one saved earlier; everything else is the environment's."""

    def __init__(self, env: Any, saved: Mapping[str, Any]) -> None:
        self._env, self._saved = env, saved

    def state(self) -> dict[str, Any]:
        return dict(self._saved)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


def token_versions(c: Completion, version: int) -> list[int]:
    """The version each sampled token of `c` was drawn from (`version`, the batch's, unless the
    completion says otherwise)."""
    return list(c.versions) if c.versions is not None else [version] * len(c.token_ids)


def overlap_metrics(produce_s: float, wait_s: float) -> dict[str, float]:
    """How much of producing a batch (sampling + scoring) the trainer did not wait for."""
    return {"async/produce_s": round(produce_s, 6), "async/wait_s": round(wait_s, 6),
            "async/overlap": round(max(0.0, 1.0 - wait_s / produce_s), 6) if produce_s > 0 else 0.0}
