"""The campaign's results per condition: mean ± sample standard deviation over seeds of each
finished run's final metric, mean RL steps and mean wall time; and the summary script.

The final metric is held-out pass@1 (the last row of each run's eval.jsonl) when every
finished run evaluated, else the last RL step's mean reward.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from retrain.campaign.expand import Campaign
from retrain.campaign.manifest import Manifest
from retrain.io import layout
from retrain.metrics.scan import iter_jsonl_objects, last_row, number

PASS_AT_1 = "eval/pass@1"
REWARD = "mean_reward"


@dataclass
class RunFinal:
    name: str
    condition: str
    status: str
    pass_at_1: float | None
    reward: float | None
    steps: int
    wall_time_s: float


@dataclass
class ConditionRow:
    condition: str
    runs: int
    finished: int
    metric: str
    mean: float | None
    std: float | None
    steps: float | None
    wall_time_s: float | None


def run_final(name: str, condition: str, status: str, log_dir: Path) -> RunFinal:
    last_rl: dict[str, Any] = {}
    wall = 0.0
    for row in iter_jsonl_objects(log_dir / layout.METRICS):
        wall += number(row.get("step_time_s")) or 0.0
        if row.get("phase") != "sft":
            last_rl = row
    evaluation = last_row(log_dir / layout.EVAL) or {}
    step = last_rl.get("step")
    return RunFinal(name, condition, status, number(evaluation.get(PASS_AT_1)), number(last_rl.get(REWARD)),
                    step + 1 if isinstance(step, int) else 0, wall)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(manifest: Manifest) -> tuple[list[ConditionRow], list[RunFinal]]:
    finals = [run_final(e.run_name, e.condition, e.status, Path(e.log_dir)) for e in manifest.runs]
    done = [f for f in finals if f.status == "finished"]
    metric = PASS_AT_1 if done and all(f.pass_at_1 is not None for f in done) else REWARD
    rows = []
    for condition in manifest.conditions:
        runs = [f for f in finals if f.condition == condition]
        ok = [f for f in runs if f.status == "finished"]
        values = [v for f in ok if (v := f.pass_at_1 if metric == PASS_AT_1 else f.reward) is not None]
        rows.append(ConditionRow(
            condition, len(runs), len(ok), metric, _mean(values),
            statistics.stdev(values) if len(values) > 1 else (0.0 if values else None),
            _mean([float(f.steps) for f in ok]), _mean([f.wall_time_s for f in ok])))
    return rows, finals


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def format_table(rows: list[ConditionRow]) -> str:
    metric = rows[0].metric if rows else REWARD
    head = ["condition", "runs", f"final {metric} (mean ± std over seeds)", "steps", "wall s"]
    body = [[r.condition, f"{r.finished}/{r.runs}",
             f"{_num(r.mean)} ± {_num(r.std)}" if r.mean is not None else "-",
             _num(r.steps, 1), _num(r.wall_time_s, 1)] for r in rows]
    widths = [max(len(x) for x in column) for column in zip(head, *body, strict=False)]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths, strict=True)))
             for line in (head, *body)]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def summary_json(rows: list[ConditionRow], finals: list[RunFinal]) -> dict[str, Any]:
    return {"conditions": [asdict(r) for r in rows], "runs": [asdict(f) for f in finals]}


def run_summary_script(campaign: Campaign) -> dict[str, Any] | None:
    """`python <summary_script> <campaign dir> [summary_args...]`, relative to the campaign file;
    its exit status is recorded, a failure does not fail the campaign."""
    settings = campaign.settings
    if not settings.summary_script:
        return None
    script = (campaign.file.parent / settings.summary_script).resolve()
    code = subprocess.run([sys.executable, str(script), str(campaign.dir), *settings.summary_args],
                          check=False).returncode
    return {"script": str(script), "args": list(settings.summary_args), "returncode": code}
