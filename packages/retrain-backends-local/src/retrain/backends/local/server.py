"""The local backend's link to an inference server (`[inference] engine` vllm, sglang, openai).

Training stays here; sampling goes to the server, and after every optimizer step the adapter
is written atomically to `<adapter_path>/_live_adapter` and loaded by the server before the
next sample (`publish`). The adapter the server was sampling from when a checkpoint was taken
is saved in the checkpoint (`sampler_adapter/`) and pushed back on resume, so a resumed run
re-samples its next batch from the same weights as the uninterrupted run — with
`max_async_level = 1` those are one update older than the checkpoint's.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retrain.backends.local.checkpointing import save_weights, write_dir_atomic
from retrain.backends.tokenizer import HFTokenizer
from retrain.config.schema import TrainConfig
from retrain.inference_engine.openai.engine import (
    API_KEY_ENV,
    OpenAIEngine,
    TextCodec,
    adapter_name_for,
)
from retrain.io.layout import LIVE_ADAPTER, SAMPLER_ADAPTER
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
    def __init__(self, config: TrainConfig, tokenizer: HFTokenizer) -> None:
        inf = config.inference
        self.live = Path(config.backend.adapter_path).resolve() / LIVE_ADAPTER
        self.engine = OpenAIEngine(inf.engine, inf.url, codec_for(tokenizer), adapter_name=adapter_name_for(str(self.live)),
                                   api_key=os.environ.get(API_KEY_ENV, ""), concurrency=inf.concurrency,
                                   timeout_s=inf.timeout_s, retries=inf.retries)
        try:
            self.engine.start()
        except BaseException:
            self.engine.close()
            raise
        self.save_s = 0.0

    @property
    def url(self) -> str:
        return self.engine.url

    def publish(self, model: Any) -> None:
        import time

        t0 = time.perf_counter()
        write_dir_atomic(self.live, lambda tmp: save_weights(model, tmp, lora=True))
        self.save_s += time.perf_counter() - t0
        self.engine.reload(str(self.live))

    def sample(self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams,
               seeds: Sequence[int] | None) -> list[list[Completion]]:
        return self.engine.generate(prompts, n, params, seeds)

    def save_into(self, checkpoint_dir: Path) -> None:
        """Copy the adapter the server samples from now into a checkpoint being written."""
        if self.live.is_dir():
            shutil.copytree(self.live, checkpoint_dir / SAMPLER_ADAPTER)

    def restore_from(self, checkpoint_dir: Path) -> bool:
        """Serve the checkpoint's sampler adapter again; False when the checkpoint has none."""
        saved = checkpoint_dir / SAMPLER_ADAPTER
        if not saved.is_dir():
            return False
        write_dir_atomic(self.live, lambda tmp: _copy_files(saved, tmp))
        self.engine.reload(str(self.live))
        return True

    def metrics(self) -> dict[str, float | int | str]:
        out = self.engine.metrics()
        out["engine_adapter_save_s"] = round(self.save_s, 6)
        self.save_s = 0.0
        return out

    def close(self) -> None:
        self.engine.close()


def _copy_files(src: Path, dst: Path) -> None:
    for f in src.iterdir():
        if f.is_file():
            shutil.copy2(f, dst / f.name)
