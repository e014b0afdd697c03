"""Training through a real `vllm serve` (the CPU build, tests/vllm_server.py) on SmolLM2-135M-Instruct:
`max_async_level` 0, 1 and 4 for three steps each, every published version loaded under its own
name and seen in GET /v1/models, the stale ones unloaded, and vLLM's logprobs within 1e-3 of the
trainer's at fp32 under the version that sampled them; a K = 2 run killed after a checkpoint
resumes with the same prompts in the same order, its batches in flight sampled again from the
versions restored from the checkpoint.

One server for the module (and any other module of the `vllm` xdist group); it is slow to
start on 2 busy cores, so the runs here are few and short."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from vllm_server import API_KEY, VllmServer

from retrain.inference_engine.openai.engine import adapter_name_for
from retrain.io.layout import LIVE_ADAPTER
from retrain.io.log import read_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vllm")]

REWARD = '''
def score(response, reference):
    return float(sum(ch.isdigit() for ch in response) >= 2)
'''


def write_run(root: Path, url: str, **training: object) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "toy_reward.py").write_text(REWARD)
    settings = {"seed": 0, "max_steps": 3, "batch_size": 2, "group_size": 4, "max_tokens": 12, "temperature": 1.0,
                "top_p": 1.0, "lr": 1e-3, "save_every": 0, **training}
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in settings.items())
    cfg = root / "run.toml"
    cfg.write_text(f"""
[model]
model = "smollm2-135m-instruct"
lora_rank = 8
[backend]
devices = "cpu"
adapter_path = "{root / 'adapters'}"
[training]
{lines}
[inference]
engine = "vllm"
url = "{url}"
timeout_s = 900.0
recompute_stale_logprobs = true
importance_sampling_correction = true
[data]
source = "arithmetic"
[reward]
type = "custom"
custom_module = "toy_reward"
custom_function = "score"
[logging]
log_dir = "{root / 'logs'}"
""")
    return cfg


def retrain(cfg: Path, *args: str, crash: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RETRAIN_INFERENCE_API_KEY": API_KEY, "RETRAIN_CRASH_AT": crash}
    return subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg), *args], cwd=cfg.parent, env=env,
                          capture_output=True, text=True, timeout=1800, check=False)


class Watch:
    """The run's published versions GET /v1/models lists, polled every half second while it trains."""

    def __init__(self, server: VllmServer, root: Path) -> None:
        self.server = server
        self.prefix = adapter_name_for(str((root / "adapters").resolve() / LIVE_ADAPTER)) + "-policy-v"
        self.seen: list[frozenset[int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def versions(self) -> frozenset[int]:
        return frozenset(int(m[len(self.prefix):]) for m in self.server.models() if m.startswith(self.prefix))

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            now = self.versions()
            if now and (not self.seen or self.seen[-1] != now):
                self.seen.append(now)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def rl_rows(root: Path) -> list[dict[str, Any]]:
    return read_jsonl(root / "logs" / "metrics.jsonl")


@pytest.mark.parametrize("level", [0, 1, 4])
def test_training_through_vllm_with_versioned_adapters(vllm_server: VllmServer, tmp_path: Path, level: int) -> None:
    root = tmp_path / f"k{level}"
    cfg = write_run(root, vllm_server.url, max_async_level=level)
    with Watch(vllm_server, root) as watch:
        res = retrain(cfg)
    assert res.returncode == 0, res.stderr[-4000:]
    rows = rl_rows(root)
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert [r["async/policy_lag"] for r in rows] == [min(s, level) for s in range(3)]
    # every completion's token ids came back from vLLM (requests of batches sampled ahead are
    # counted in the row of the step during which they finished)
    recovered = sum(r[f"engine_token_recovery_{k}"] for r in rows for k in ("content", "ids", "strings"))
    assert recovered == 3 * 2 * 4 and sum(r["engine_token_recovery_text"] for r in rows) == 0, rows
    # vLLM samples what the trainer computes, at fp32, under the version that sampled each token
    trained = [r for r in rows if r["num_datums"]]
    assert trained and all(float(r["engine/logprob_gap_max"]) <= 1e-3 for r in trained), trained
    # every version the run published, under its own name, at most K + 1 at a time (the oldest
    # is unloaded before a new one loads)
    assert set().union(*watch.seen) >= {0, 1, 2}, watch.seen
    assert all(len(v) <= level + 1 for v in watch.seen), watch.seen
    if level < 2:  # version 0 was unloaded once version level + 1 was published
        assert any(level + 1 in v and 0 not in v for v in watch.seen), watch.seen
    assert not watch.versions()  # the run unloaded its adapters when it ended
    assert not (root / "adapters" / "_published" / "policy-v0").exists() or level >= 2


def test_a_k2_run_killed_after_a_checkpoint_resumes_on_the_saved_versions(vllm_server: VllmServer,
                                                                         tmp_path: Path) -> None:
    kw = {"max_steps": 4, "save_every": 2, "max_async_level": 2}
    whole = write_run(tmp_path / "whole", vllm_server.url, **kw)
    assert retrain(whole).returncode == 0
    cut = write_run(tmp_path / "cut", vllm_server.url, **kw)
    assert retrain(cut, crash="after_checkpoint@1").returncode != 0
    saved = tmp_path / "cut" / "adapters" / "checkpoint_step_2" / "sampler_versions.safetensors"
    assert saved.is_file()
    resumed = retrain(cut, "--resume", str(tmp_path / "cut" / "logs"))
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    rows = rl_rows(tmp_path / "cut")
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert [r["async/policy_lag"] for r in rows] == [0, 1, 2, 2]
    # the batches in flight at the checkpoint were sampled again from versions 0 and 1 as restored:
    # vLLM's logprobs match the trainer's recomputed under them
    assert all(float(r["engine/logprob_gap_max"]) <= 1e-3 for r in rows if r["num_datums"]), rows

    def prompts(root: Path) -> list[str]:
        return [g["prompt"] for g in read_jsonl(root / "logs" / "emergence" / "generations.jsonl")]

    assert prompts(tmp_path / "whole") == prompts(tmp_path / "cut")
    assert re.search(r"resum", resumed.stderr + resumed.stdout, re.I)
