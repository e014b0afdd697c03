"""Routing replay through the real trainer, in process, on a tiny Qwen3-MoE sampled two batches
ahead (`max_async_level = 2`, the in-process engine's merged copy in the producer's thread):
every step replays the sampler's recorded routes, and a run stopped by Ctrl-C mid-way and
resumed (its batches in flight sampled again from the saved versions) ends exactly where the
uninterrupted run does: metrics (the replay's counts included) and final adapter, bit for bit."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from tiny_run import Messages, write_tiny_run

from retrain.io.log import read_jsonl
from retrain.training.interrupt import RunInterrupted
from retrain.training.trainers import train
from retrain.validation.load import load_config

sys.path.insert(0, str(Path(__file__).parents[1] / "packages" / "retrain-backends-local" / "tests"))
from tiny_families import write_checkpoint

INTERRUPTING = '''
import os, signal

calls = [0]

def score(response, reference):
    calls[0] += 1
    if str(calls[0]) == os.environ.get("SIGINT_AT_CALL"):
        os.kill(os.getpid(), signal.SIGINT)
    return min(1.0, sum(ch.isdigit() for ch in response) / 4 + len(response) / 40)
'''
#: left out of the comparison: timings (the overlap of sampling with training among them), and the engine's counters (a row counts the sampling
#: that finished since the previous row, which the producer thread's timing decides)
VOLATILE = ("time", "_s", "tokens_per_second", "share", "process_max_rss_mb", "engine_", "overlap")


def config_for(root: Path, model: Path, name: str) -> Any:
    (root / "interrupting.py").write_text(INTERRUPTING)
    cfg = write_tiny_run(root, name, training={"max_steps": 4, "max_async_level": 2, "save_every": 2},
                         tables={"inference": {"routing_replay": True}})
    text = cfg.read_text().replace('custom_module = "toy_reward"', 'custom_module = "interrupting"')
    cfg.write_text(text.replace('model = "tiny"', f'model = "{model}"'))
    sys.modules.pop("interrupting", None)
    importlib.invalidate_caches()
    return load_config(cfg, [], import_plugins=False).config


def steady(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if not any(t in k for t in VOLATILE)} for r in rows]


def test_replay_runs_ahead_and_resumes_bit_for_bit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    model = write_checkpoint("qwen3_moe", tmp_path / "moe")
    train(config_for(tmp_path, model, "plain"), Messages())
    want = read_jsonl(tmp_path / "plain" / "logs" / "metrics.jsonl")
    assert [r["async/policy_lag"] for r in want] == [0, 1, 2, 2]
    trained = [r for r in want if r["num_datums"]]
    assert trained and all(r["routing/replayed_routes"] > 0 for r in trained)

    monkeypatch.setenv("SIGINT_AT_CALL", "17")  # scoring the third batch (8 completions a batch)
    config = config_for(tmp_path, model, "cut")
    with pytest.raises(RunInterrupted):
        train(config, Messages())
    logs = tmp_path / "cut" / "logs"
    assert len(read_jsonl(logs / "metrics.jsonl")) < len(want)
    monkeypatch.delenv("SIGINT_AT_CALL")
    resumed = load_config(tmp_path / "cut.toml", ["--resume", str(logs)], import_plugins=False).config
    train(resumed, Messages())
    got = read_jsonl(logs / "metrics.jsonl")
    differ = [(a.get("step"), k, a.get(k), b.get(k)) for a, b in zip(steady(got), steady(want), strict=False)
              for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    assert len(got) == len(want) and not differ, differ
    adapter = "adapters/final/adapter_model.safetensors"
    assert (tmp_path / "cut" / adapter).read_bytes() == (tmp_path / "plain" / adapter).read_bytes()
