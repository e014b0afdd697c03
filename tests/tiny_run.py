"""A one-file run of the tiny model on CPU, written and run as a user would (`retrain FILE`):
the shared setup of the workspace tests of the other trainers and detectors.

`retrain` runs the command in this process (the real entry point, arguments, exit status and
output, without a new interpreter's ~15 s of imports: these tests are about what the trainer
does, not about the process); `retrain_process` runs it in a subprocess."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


ENV = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def retrain_process(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`retrain ARGS CFG` in a new process, from CFG's folder."""
    return subprocess.run([sys.executable, "-m", "retrain.cli", *args, str(cfg)], cwd=cfg.parent,
                          env={**os.environ, **ENV}, capture_output=True, text=True, timeout=900, check=False)


def retrain(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`retrain ARGS CFG` in this process, from CFG's folder: its exit status and what it
    printed, as `retrain_process` returns them (see `retrain_in`)."""
    return retrain_in(cfg.parent, *args, str(cfg))


def retrain_in(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """`retrain ARGV` in this process, from `folder`. The process is left as it was found:
    working folder, sys.path, environment, modules imported from the folder (a custom reward),
    torch's thread count, deterministic-algorithms switch and the RNG states, the kernels'
    mode."""
    import numpy as np
    import torch

    from retrain.cli import main

    root = folder.resolve()
    saved_cwd, saved_path, saved_env, saved_modules = os.getcwd(), list(sys.path), dict(os.environ), set(sys.modules)
    threads = torch.get_num_threads()
    deterministic = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
    rng = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    kernels = sys.modules.get("retrain.kernels.accelerators")
    mode = kernels.get_kernel_mode() if kernels is not None else None
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        os.chdir(root)
        os.environ.update(ENV)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(argv))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        os.environ.clear()
        os.environ.update(saved_env)
        for name in set(sys.modules) - saved_modules:
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(root)):
                del sys.modules[name]
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
        torch.set_rng_state(rng[0])
        np.random.set_state(rng[1])
        random.setstate(rng[2])
        kernels = sys.modules.get("retrain.kernels.accelerators")
        if kernels is not None:
            kernels.set_kernel_mode(mode or "auto")
    return subprocess.CompletedProcess(["retrain", *argv], code, out.getvalue(), err.getvalue())


class Messages:
    """A reporter for in-process `train` calls: keeps the messages and the final summary,
    draws nothing."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.summary: Any = None

    def message(self, text: str) -> None:
        self.lines.append(text)

    def start(self, info: Any) -> None: ...

    def warmup(self, step: int, total: int, row: Any) -> None: ...

    def step(self, step: int, total: int, row: Any) -> None: ...

    def sft(self, step: int, total: int, row: Any) -> None: ...

    def finish(self, summary: Any) -> None:
        self.summary = summary


def tiny_classifier(folder: Path) -> Path:
    """A tiny random Qwen3 sequence classifier (one label) with tiny's tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from retrain.models.load import ModelSpec, load_tokenizer
    from retrain.models.tiny import ASSETS

    raw = json.loads((ASSETS / "config.json").read_text())
    raw.pop("architectures")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        model = AutoModelForSequenceClassification.from_config(AutoConfig.for_model(raw.pop("model_type"), **raw,
                                                                                    num_labels=1))
    model.save_pretrained(str(folder))
    load_tokenizer(ModelSpec("tiny")).save_pretrained(str(folder))
    return folder
