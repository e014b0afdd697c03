"""A one-file run of the tiny model on CPU, written and run as a user would (`retrain FILE`):
the shared setup of the workspace tests of the other trainers and detectors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

GRADED_REWARD = '''
def score(response, reference):
    """A graded toy reward with spread on an untrained model: the share of digits, capped."""
    return min(1.0, sum(ch.isdigit() for ch in response) / 4)
'''

TRAINING = {"seed": 0, "max_steps": 2, "batch_size": 2, "group_size": 4, "max_tokens": 8, "temperature": 1.0,
            "lr": 1e-2, "save_every": 0}


def _table(values: Mapping[str, object]) -> str:
    return "\n".join(f"{k} = {json.dumps(v)}" for k, v in values.items())


def write_tiny_run(root: Path, name: str = "run", *, training: Mapping[str, object] | None = None,
                   tables: Mapping[str, Mapping[str, object]] | None = None) -> Path:
    """`<root>/<name>.toml`, logging to `<root>/<name>/logs` and saving to `<root>/<name>/adapters`;
    `training` overrides TRAINING, `tables` adds sections ({"algorithm": {...}, ...})."""
    (root / "toy_reward.py").write_text(GRADED_REWARD)
    extra = "\n".join(f"[{section}]\n{_table(values)}" for section, values in (tables or {}).items())
    cfg = root / f"{name}.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
lora_rank = 4
[backend]
devices = "cpu"
adapter_path = "{root / name / 'adapters'}"
[training]
{_table({**TRAINING, **(training or {})})}
[data]
source = "arithmetic"
[reward]
type = "custom"
custom_module = "toy_reward"
[logging]
log_dir = "{root / name / 'logs'}"
{extra}
""")
    return cfg


def retrain(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "retrain.cli", *args, str(cfg)], cwd=cfg.parent, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
