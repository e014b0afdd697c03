"""The local backend's link to an inference server (`[inference] engine` vllm, sglang, openai).

Training stays here; sampling goes to the server. Each published version of the weights
(retrain.backends.protocol.VersionedSampler: version N after N RL updates) is written
atomically to `<adapter_path>/_published/policy-v<N>` and loaded under its own name
(`<run>-policy-v<N>`), so requests of version N finish on N while N + 1 loads; versions older
than `keep` behind the new one are unloaded (before it loads) and their folders removed. Evaluation between steps
samples the latest trained weights, written to a new folder under `<adapter_path>/_live_adapter`
and loaded in place as `<run>-latest` when they changed. A run unloads its adapters when it
ends.

In a run of several processes only rank 0 talks to the server; the weights it writes are
gathered from every rank (a collective, so every rank calls `publish` and `latest`).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retrain.backends.local.checkpointing import save_weights, write_dir_atomic
from retrain.backends.local.versions import Snapshot
from retrain.backends.tokenizer import HFTokenizer
from retrain.config.folders import adapter_folder
from retrain.config.schema import TrainConfig
from retrain.inference_engine.openai.client import InferenceServerError
from retrain.inference_engine.openai.engine import (
    API_KEY_ENV,
    OpenAIEngine,
    TextCodec,
    adapter_name_for,
)
from retrain.io.layout import LIVE_ADAPTER, PUBLISHED_ADAPTERS
from retrain.process.world import World
from retrain.types import Completion, SamplingParams


def codec_for(tokenizer: HFTokenizer) -> TextCodec:
    hf = tokenizer.hf
    unk = getattr(hf, "unk_token_id", None)

    def token_ids(strings: Sequence[str]) -> list[int | None]:
        ids = hf.convert_tokens_to_ids(list(strings))
        return [None if i is None or (unk is not None and i == unk) else int(i) for i in ids]

    return TextCodec(prompt_text=lambda ids: str(hf.decode(list(ids), skip_special_tokens=False)),
                     encode=tokenizer.encode, token_ids=token_ids)


class ServerLink:
    def __init__(self, config: TrainConfig, tokenizer: HFTokenizer, world: World) -> None:
        inf = config.inference
        root = adapter_folder(config).resolve()
        self.live, self.published = root / LIVE_ADAPTER, root / PUBLISHED_ADAPTERS
        self.world = world
        self.engine = OpenAIEngine(inf.engine, inf.url, codec_for(tokenizer), adapter_name=adapter_name_for(str(self.live)),
                                   api_key=os.environ.get(API_KEY_ENV, ""), concurrency=inf.concurrency,
                                   timeout_s=inf.timeout_s, retries=inf.retries,
                                   partial_tokens=inf.partial_rollout_tokens)
        try:
            if world.leader:
                self.engine.start()
        except BaseException:
            self.engine.close()
            raise
        self.save_s = 0.0
        self.latest_writes = 0

    @property
    def url(self) -> str:
        return self.engine.url

    def publish(self, model: Any, version: int, keep: int, weights: Snapshot | None = None) -> None:
        """Version `version` (the live weights, or `weights`) loaded under its own name;
        those older than `version - keep` unloaded."""
        folder = self.published / f"policy-v{version}"
        self._write(folder, model, weights)
        if not self.world.leader:
            return
        # first, so the server never holds more than keep + 1 versions: no batch in flight
        # samples from one older than version - keep
        for old in sorted(v for v in self.engine.versions if v < version - keep):
            self.engine.unload_version(old)
            shutil.rmtree(self.published / f"policy-v{old}", ignore_errors=True)
        self.engine.load_version(version, str(folder))

    def latest(self, model: Any) -> None:
        """The latest trained weights, for a sample that names no version. Each write goes to a
        new folder: vLLM keeps the prefix cache of an adapter reloaded from the same path."""
        self.latest_writes += 1
        folder = self.live / f"update-{self.latest_writes}"
        self._write(folder, model, None)
        if self.world.leader:
            self.engine.reload(str(folder))
            shutil.rmtree(self.live / f"update-{self.latest_writes - 1}", ignore_errors=True)

    def _write(self, folder: Path, model: Any, weights: Snapshot | None) -> None:
        t0 = time.perf_counter()
        if self.world.distributed:
            from retrain.backends.local import distributed

            distributed.save_adapter(str(folder), model, self.world, lora=True, weights=weights)
        else:
            write_dir_atomic(folder, lambda tmp: save_weights(model, tmp, lora=True, state_dict=weights))
        self.save_s += time.perf_counter() - t0

    def sample(self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams,
               seeds: Sequence[int] | None) -> list[list[Completion]]:
        return self.engine.generate(prompts, n, params, seeds)

    def metrics(self) -> dict[str, float | int | str]:
        out = self.engine.metrics()
        out["engine_adapter_save_s"] = round(self.save_s, 6)
        out["engine_adapter_versions"] = len(self.engine.versions)
        self.save_s = 0.0
        return out

    def close(self) -> None:
        """Unload the run's adapters (a server outlives its runs; a resumed run loads what it
        needs again), then close the connection; a server already gone is no error here."""
        try:
            if self.world.leader:
                self.engine.unload_all()
        except InferenceServerError:
            pass
        finally:
            self.engine.close()
