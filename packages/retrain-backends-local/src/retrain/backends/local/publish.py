"""Where the local backend publishes its trained weights for sampling, and what it keeps of them.

- With the in-process engine and nothing sampled ahead, sampling reads the trained model: there
  is nothing to publish.
- Sampling ahead in-process (`max_async_level > 0`, engine = "pytorch"): each version's adapter
  is snapshotted into the store a merged copy samples from (retrain.backends.local.sync.
  AheadSampler).
- With an inference server: each version is loaded under its own name and the latest trained
  weights once more for evaluation (retrain.backends.local.server); with `max_async_level > 0`
  the versions are snapshotted too, to resume from and to measure the engine's gap at
  (retrain.backends.local.stale).

The snapshots of the versions batches in flight sample from are saved in checkpoints and
served again on resume, so those batches are sampled again from the same weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from retrain.backends.local.server import ServerLink
from retrain.backends.local.stale import StaleGap
from retrain.backends.local.sync import AheadSampler
from retrain.backends.local.versions import VersionStore, snapshot
from retrain.backends.seeds import request_seeds
from retrain.backends.tokenizer import HFTokenizer
from retrain.config.schema import TrainConfig
from retrain.process.world import World
from retrain.types import Completion, SamplingParams


class Publication:
    def __init__(self, config: TrainConfig, tokenizer: HFTokenizer, world: World, base: torch.nn.Module, *,
                 seed: int, lora: bool) -> None:
        """`base` is the model before LoRA wrapping (the in-process sampler copies it)."""
        on_server = config.inference.engine != "pytorch"
        self.world, self.seed = world, seed
        self.versions = VersionStore() if config.training.max_async_level > 0 and lora else None
        self.ahead = AheadSampler(base, seed, self.versions) if self.versions is not None and not on_server else None
        self.stale_gap = StaleGap(self.versions, config.inference.recompute_stale_logprobs)
        self.server = ServerLink(config, tokenizer, world) if on_server else None
        self.stale = True  # the server's latest adapter is older than the trained weights

    def bind(self, model: torch.nn.Module, device: torch.device) -> None:
        """The in-process sampler's copy on `device`, paired with the wrapped model's LoRA layers."""
        if self.ahead is not None:
            self.ahead.merged.model.to(device)
            self.ahead.merged.bind(model)

    def publish(self, model: torch.nn.Module, version: int, keep: int) -> None:
        self.stale_gap.current = version
        weights = snapshot(model, self.world) if self.versions is not None else None
        if self.ahead is not None and weights is not None:
            self.ahead.publish(version, weights, keep)
        elif self.versions is not None and weights is not None:
            self.versions.add(version, weights)
            self.versions.release_before(version - keep)
        if self.server is not None:
            self.server.publish(model, version, keep, weights)

    def trained(self) -> None:
        """The trained weights changed."""
        self.stale = True

    def latest(self, model: torch.nn.Module) -> None:
        """The server's latest adapter is the trained weights (a collective in a world)."""
        if self.server is not None and self.stale:
            self.server.latest(model)
            self.stale = False

    def sample_server(self, model: torch.nn.Module, prompts: Sequence[Sequence[int]], num_samples: int,
                      params: SamplingParams) -> list[list[Completion]]:
        """On the inference server. In a multi-process run, training samples are drawn by rank
        0 alone (the producer shares them); a seeded call (evaluation) is made by every rank:
        rank 0 samples and the others receive its completions."""
        assert self.server is not None
        if params.want_entropy:
            raise RuntimeError("an inference server returns no token entropies (want_entropy)")
        if params.policy_version is None:
            self.latest(model)
        batch = params.seed if params.seed is not None else params.batch_id
        out: list[list[Completion]] = []
        if self.world.leader:
            out = self.server.sample(prompts, num_samples, params, request_seeds(self.seed, batch, len(prompts)))
        if self.world.distributed and params.seed is not None:
            from retrain.backends.local import distributed

            out = distributed.broadcast(out, self.world)
        return out

    def save(self, folder: Path) -> None:
        """Into a checkpoint being written: the versions batches in flight sample from."""
        if self.versions is not None:
            self.versions.save(folder)

    def restore(self, folder: Path, model: torch.nn.Module) -> None:
        """From a checkpoint: those versions held, and served, again."""
        self.stale = True
        saved = VersionStore.load(folder) if self.versions is not None else None
        if saved is None or self.versions is None:
            return
        self.versions.versions = saved.versions
        if self.ahead is not None:
            self.ahead.restore(self.versions)
        if self.server is not None:
            for version, weights in sorted(saved.versions.items()):
                self.server.publish(model, version, version + 1, weights)
        self.stale_gap.current = max(saved.versions, default=0)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
