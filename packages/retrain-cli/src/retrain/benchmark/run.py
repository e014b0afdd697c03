"""Repeated runs of one config for an honest spread: each repeat is a fresh `retrain` process
(so no repeat inherits warm imports, caches or allocator state from another) in
`<suite>/repeat_NN/`, with its adapter in `repeat_NN/adapter` and W&B off; the driver times
each process whole. The suite folder keeps `benchmark_meta.json` and `benchmark_summary.json`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from retrain.benchmark.summary import aggregate, run_summary
from retrain.campaign.configs import config_toml
from retrain.campaign.worker import error_from_log
from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.io import layout
from retrain.io.atomic import write_json_atomic, write_text_atomic
from retrain.io.json import load_json_object


class RepeatFailed(UserError, RuntimeError):
    """A repeat exited non-zero; the message names it and its error."""


@dataclass
class Suite:
    folder: Path
    runs: list[dict[str, Any]]
    stats: dict[str, dict[str, float]]


def suite_dir(config: TrainConfig, config_path: str, output_dir: str | None) -> Path:
    if output_dir:
        return Path(output_dir).resolve()
    log_dir = Path(config.logging.log_dir).resolve()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return log_dir.parent / f"{log_dir.name}-{Path(config_path).stem or 'config'}-benchmark-{stamp}"


def _repeat_config(config: TrainConfig, folder: Path) -> TrainConfig:
    r = msgspec.structs.replace
    return r(config, logging=r(config.logging, log_dir=str(folder), wandb_project="", wandb_run_name="",
                               wandb_entity="", wandb_group="", wandb_tags="", trackers=[]),
             backend=r(config.backend, adapter_path=str(folder / "adapter")), resume=r(config.resume, from_=""))


def run_repeats(config: TrainConfig, config_path: str, repeats: int, output_dir: str | None,
                say: Any = print) -> Suite:
    if repeats <= 0:
        raise UserError(f"--repeat {repeats}: must be at least 1")
    folder = suite_dir(config, config_path, output_dir)
    if folder.exists() and any(folder.iterdir()):
        raise UserError(f"{folder} is not empty", hint="choose another --output-dir")
    write_json_atomic(folder / layout.BENCHMARK_META, {
        "repeats": repeats, "config": config_path, "base_log_dir": config.logging.log_dir,
        "base_adapter_path": config.backend.adapter_path, "wandb_disabled": True, "trackers_disabled": True})
    runs = []
    for index in range(repeats):
        repeat = folder / f"repeat_{index:02d}"
        path = repeat / "config.toml"
        write_text_atomic(path, config_toml(_repeat_config(config, repeat), f"benchmark repeat {index} of {config_path}"))
        say(f"[{index + 1}/{repeats}] {repeat.name}")
        started = time.perf_counter()
        with (repeat / layout.STDOUT).open("wb") as out, (repeat / layout.STDERR).open("wb") as err:
            code = subprocess.run([sys.executable, "-m", "retrain.cli", str(path)], stdout=out, stderr=err,
                                  stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                      filter(None, [str(Path(config_path).parent.resolve()), str(Path.cwd()),
                                                    os.environ.get("PYTHONPATH", "")]))},
                                  check=False).returncode
        wall = time.perf_counter() - started
        if code != 0:
            raise RepeatFailed(f"benchmark run {repeat.name} failed (exit status {code}): "
                               f"{error_from_log(repeat / layout.STDERR)}", hint=f"its output: {repeat}")
        runs.append(run_summary(repeat, repeat.name, round(wall, 3)))
    return _write(folder, runs)


def _write(folder: Path, runs: list[dict[str, Any]]) -> Suite:
    suite = Suite(folder, runs, aggregate(runs))
    write_json_atomic(folder / layout.BENCHMARK_SUMMARY, {"runs": runs, "aggregate": suite.stats})
    return suite


def summarize_dir(target: Path) -> Suite | dict[str, Any]:
    """A run dir's summary, or a suite's over its child run dirs."""
    if (target / layout.METRICS).is_file():
        return run_summary(target)
    children = sorted(p for p in target.iterdir() if (p / layout.METRICS).is_file()) if target.is_dir() else []
    if not children:
        raise UserError(f"{target}: no run folders (with {layout.METRICS}) to summarise")
    saved = load_json_object(target / layout.BENCHMARK_SUMMARY) or {}
    walls = {r.get("label"): r.get("process_wall_s") for r in saved.get("runs", []) if isinstance(r, dict)}
    runs = [run_summary(c, c.name, walls.get(c.name)) for c in children]
    return Suite(target, runs, aggregate(runs))
