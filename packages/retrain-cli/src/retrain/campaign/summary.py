"""The campaign's results per condition: mean ± sample standard deviation over seeds of each
finished run's final mean reward (its last RL step) and, where runs evaluate, of its last
held-out evaluation (eval.jsonl: pass@1 and pass@k); mean RL steps and mean wall time; and
the summary script.

A condition's held-out statistics are over the finished runs that evaluated; the cell says
how many when that is not all of them. The headline metric (`metric`, `mean`, `std`) is
held-out pass@1 when every finished run of the campaign evaluated, else the final reward.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from retrain.campaign.expand import Campaign
from retrain.campaign.manifest import Manifest
from retrain.evaluation.row import EvalRow, pass_key
from retrain.io import layout
from retrain.metrics.scan import iter_jsonl_objects, last_row, number

PASS_AT_1 = pass_key(1)
REWARD = "mean_reward"


@dataclass
class RunFinal:
    name: str
    condition: str
    status: str
    reward: float | None
    steps: int
    wall_time_s: float
    #: the last held-out evaluation (None when the run did not evaluate)
    pass_at_1: float | None = None
    pass_at_k: float | None = None
    eval_k: int | None = None
    eval_step: int | None = None


@dataclass
class Stat:
    """Mean and sample std over `n` runs (std 0 for one run)."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat | None:
        if not values:
            return None
        return cls(sum(values) / len(values), statistics.stdev(values) if len(values) > 1 else 0.0, len(values))


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
    reward: Stat | None = None
    pass_at_1: Stat | None = None
    pass_at_k: Stat | None = None
    #: the k of pass@k (None when no run evaluated, or the runs' k differ)
    eval_k: int | None = None


def run_final(name: str, condition: str, status: str, log_dir: Path) -> RunFinal:
    last_rl: dict[str, Any] = {}
    wall = 0.0
    for row in iter_jsonl_objects(log_dir / layout.METRICS):
        wall += number(row.get("step_time_s")) or 0.0
        if row.get("phase") != "sft":
            last_rl = row
    step = last_rl.get("step")
    final = RunFinal(name, condition, status, number(last_rl.get(REWARD)),
                     step + 1 if isinstance(step, int) else 0, wall)
    evaluation = EvalRow.from_dict(last_row(log_dir / layout.EVAL) or {})
    if evaluation is not None:
        final.pass_at_1, final.pass_at_k = evaluation.pass_at_1, evaluation.pass_at_k
        final.eval_k, final.eval_step = evaluation.k, evaluation.step
    return final


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _condition(condition: str, runs: list[RunFinal], metric: str) -> ConditionRow:
    ok = [f for f in runs if f.status == "finished"]
    reward = Stat.of([f.reward for f in ok if f.reward is not None])
    evaluated = [f for f in ok if f.pass_at_1 is not None]
    pass_at_1 = Stat.of([f.pass_at_1 for f in evaluated if f.pass_at_1 is not None])
    headline = pass_at_1 if metric == PASS_AT_1 else reward
    ks = {f.eval_k for f in evaluated}
    return ConditionRow(
        condition, len(runs), len(ok), metric, headline.mean if headline else None,
        headline.std if headline else None, _mean([float(f.steps) for f in ok]), _mean([f.wall_time_s for f in ok]),
        reward, pass_at_1, Stat.of([f.pass_at_k for f in evaluated if f.pass_at_k is not None]),
        ks.pop() if len(ks) == 1 else None)


def summarize(manifest: Manifest) -> tuple[list[ConditionRow], list[RunFinal]]:
    finals = [run_final(e.run_name, e.condition, e.status, Path(e.log_dir)) for e in manifest.runs]
    done = [f for f in finals if f.status == "finished"]
    metric = PASS_AT_1 if done and all(f.pass_at_1 is not None for f in done) else REWARD
    rows = [_condition(c, [f for f in finals if f.condition == c], metric) for c in manifest.conditions]
    return rows, finals


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _cell(stat: Stat | None, finished: int) -> str:
    if stat is None:
        return "-"
    text = f"{_num(stat.mean)} ± {_num(stat.std)}"
    return text if stat.n == finished else f"{text} ({stat.n} of {finished})"


def format_table(rows: list[ConditionRow]) -> str:
    """Per condition: runs finished, the final reward, and the held-out pass@1 / pass@k
    columns when any run evaluated (mean ± std over seeds), steps and wall time."""
    evaluated = any(r.pass_at_1 is not None for r in rows)
    ks = {r.eval_k for r in rows if r.pass_at_1 is not None}
    k = ks.pop() if len(ks) == 1 else None
    head = ["condition", "runs", "final reward (mean ± std over seeds)"]
    if evaluated:
        head += ["held-out pass@1", f"held-out pass@{k if k is not None else 'k'}"]
    head += ["steps", "wall s"]
    body = []
    for r in rows:
        line = [r.condition, f"{r.finished}/{r.runs}", _cell(r.reward, r.finished)]
        if evaluated:
            at_k = _cell(r.pass_at_k, r.finished)
            if k is None and r.eval_k is not None and r.pass_at_k is not None:
                at_k += f" (k={r.eval_k})"
            line += [_cell(r.pass_at_1, r.finished), at_k]
        body.append([*line, _num(r.steps, 1), _num(r.wall_time_s, 1)])
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
