"""Runs of `retrain` with backend = "tinker" against the test server, for the Tinker tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rows import assert_rows_match
from txserver.server import API_KEY, TxServer

from retrain.training.telemetry import WALL_CLOCK_FIELDS

REWARD = '''
def score(response, reference):
    """Variance on an untrained model: the share of digits in the response."""
    return sum(ch.isdigit() for ch in response) / max(len(response), 1)
'''


def write_run(root: Path, server: TxServer, *, url: str = "", eval_every: int = 2,
              options: dict[str, Any] | None = None, **training: Any) -> Path:
    (root / "toy_reward.py").write_text(REWARD)
    settings = {"seed": 0, "max_steps": 4, "batch_size": 2, "group_size": 4, "max_tokens": 6, "temperature": 1.0,
                "top_p": 1.0, "lr": 1e-2, "save_every": 2, **training}
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in settings.items())
    opts = "\n".join(f"{k} = {json.dumps(v)}" for k, v in {"call_timeout_s": 90, **(options or {})}.items())
    evaluation = f"[eval]\nevery = {eval_every}\nmax_examples = 3\nk = 2\ntemperature = 1.0" if eval_every else ""
    cfg = root / "run.toml"
    cfg.write_text(f"""
[model]
model = "{server.model}"
base_url = "{url or server.url}"
lora_rank = 4
[backend]
backend = "tinker"
adapter_path = "{root / 'adapters'}"
throttle_dir = "{root / 'throttle'}"
max_concurrent = 2
[backend.options]
{opts}
[algorithm]
advantage_mode = "grpo"
transform_mode = "none"
[training]
{lines}
[data]
source = "arithmetic"
[reward]
type = "custom"
custom_module = "toy_reward"
{evaluation}
[logging]
log_dir = "{root / 'logs'}"
""")
    return cfg


def retrain(cfg: Path, *args: str, crash: str = "", timeout: float = 900, command: str = "",
            python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TINKER_API_KEY": API_KEY, "RETRAIN_CRASH_AT": crash}
    head = [command] if command else []
    return subprocess.run([python, "-m", "retrain.cli", *head, str(cfg), *args], cwd=cfg.parent, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def deterministic(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_FIELDS and not k.startswith("tinker/")
             and k != "eval/wall_s"} for r in rows]


def assert_same_run(resumed: list[dict[str, Any]], straight: list[dict[str, Any]]) -> None:
    """A resumed run logs what an uninterrupted one did, bit for bit: the same keys, steps,
    tokens, rewards and service floats (the test server runs every sequence alone at a fixed
    shape, server.py, so its arithmetic does not follow the timing of concurrent requests)."""
    assert_rows_match(deterministic(resumed), deterministic(straight), rel=0.0)


def assert_no_key(*roots: Path) -> None:
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                assert API_KEY.encode() not in path.read_bytes(), f"the API key leaked into {path}"
