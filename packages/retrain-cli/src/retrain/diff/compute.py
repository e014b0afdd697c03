"""Comparing two runs, or two conditions of a campaign averaged over their seeds.

Reads every metrics row (one pass per run): finals from the last row, wall time as the sum of
step times, steps as the row count, per-row correct-rate curves, and performance means. A run
that evaluates adds the metrics of its last held-out evaluation (eval.jsonl) to its finals.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrain.errors import UserError
from retrain.evaluation.row import EvalRow
from retrain.io import layout
from retrain.io.json import load_json_object
from retrain.metrics.scan import last_row, number, scan_metrics_file
from retrain.status.plot import EVAL_FIELD, PLOT_FIELDS, eval_series
from retrain.status.scan import resolve_log_dir

FINAL_FIELDS = ("loss", "correct_rate", "mean_reward")
SERIES_FIELDS = (*PLOT_FIELDS, EVAL_FIELD)
MEAN_FIELDS = ("step_time_s", "sample_time_s", "train_time_s", "tokens_per_second", "sample_share", "train_share")
PEAK_FIELD = "process_max_rss_mb"
CURVE_FIELD = "correct_rate"
#: Metrics where the smaller value wins; every other metric is higher-is-better.
LOWER_IS_BETTER = frozenset({"loss", "mean_step_time_s", "mean_sample_time_s", "mean_train_time_s",
                             "peak_process_max_rss_mb"})
TIE = 1e-9


@dataclass
class Side:
    label: str
    final: dict[str, float | None]
    perf: dict[str, float]
    wall_time_s: float
    steps: int
    curve: list[float]
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    runs: int = 1


def _metrics_file(path: Path) -> Path:
    return path if path.is_file() else path / layout.METRICS


def held_out_finals(run_dir: Path) -> dict[str, float | None]:
    """The last evaluation's held-out metrics, under their eval.jsonl names."""
    row = EvalRow.from_dict(last_row(run_dir / layout.EVAL) or {})
    if row is None:
        return {}
    return {k: v for k, v in row.to_dict().items()
            if k.startswith(("eval/pass@", "eval/maj@")) or k == "eval/mean_reward"}


def load_run(path: Path, label: str | None = None) -> Side:
    metrics = _metrics_file(path)
    if not metrics.is_file():
        raise UserError(f"no metrics.jsonl in {path}")
    scan = scan_metrics_file(metrics, mean_fields=MEAN_FIELDS, max_fields=(PEAK_FIELD,),
                             series_fields=(*PLOT_FIELDS, CURVE_FIELD))
    last = scan.last or {}
    perf = {f"mean_{name}": value for name, value in scan.means.items()}
    if PEAK_FIELD in scan.maxima:
        perf[f"peak_{PEAK_FIELD}"] = scan.maxima[PEAK_FIELD]
    return Side(
        label=label or str(path),
        final={**{name: number(last.get(name)) for name in FINAL_FIELDS}, **held_out_finals(metrics.parent)},
        perf=perf,
        wall_time_s=scan.wall_time_s,
        steps=scan.rows,
        curve=[v for _, v in scan.series.get(CURVE_FIELD, [])],
        series={**{name: scan.series.get(name, []) for name in PLOT_FIELDS}, EVAL_FIELD: eval_series(metrics.parent)},
    )


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def average(label: str, sides: list[Side]) -> Side:
    """Seeds of one condition: means of finals, perf and wall time; curves averaged per index
    (ragged lengths allowed), series per step; steps as the rounded mean."""
    keys = {k for s in sides for k in s.perf}
    perf = {k: v for k in sorted(keys) if (v := _mean([s.perf.get(k) for s in sides])) is not None}
    length = max(len(s.curve) for s in sides)
    columns = [[s.curve[i] for s in sides if i < len(s.curve)] for i in range(length)]
    curve = [sum(column) / len(column) for column in columns]
    series = {}
    for name in SERIES_FIELDS:
        by_step: dict[int, list[float]] = defaultdict(list)
        for s in sides:
            for step, value in s.series.get(name, []):
                by_step[step].append(value)
        series[name] = [(step, sum(v) / len(v)) for step, v in sorted(by_step.items())]
    return Side(
        label=label,
        final={k: _mean([s.final.get(k) for s in sides]) for k in _union(s.final for s in sides)},
        perf=perf,
        wall_time_s=sum(s.wall_time_s for s in sides) / len(sides),
        steps=round(sum(s.steps for s in sides) / len(sides)),
        curve=curve,
        series=series,
        runs=len(sides),
    )


def load_condition(campaign: Path, condition: str) -> Side:
    manifest = load_json_object(campaign / layout.MANIFEST)
    if manifest is None:
        raise UserError(f"no readable manifest.json in {campaign}")
    entries = [e for e in manifest.get("runs", []) if isinstance(e, dict)]
    chosen = [e for e in entries if e.get("condition") == condition]
    if not chosen:
        known = sorted({str(e.get("condition")) for e in entries})
        raise UserError(f"condition {condition!r} is not in {campaign}/manifest.json",
                         hint="conditions: " + ", ".join(known) if known else "")
    sides = []
    for entry in chosen:
        log_dir = resolve_log_dir(campaign, entry)
        if log_dir is not None and (log_dir / layout.METRICS).is_file():
            sides.append(load_run(log_dir))
    if not sides:
        raise UserError(f"no run of condition {condition!r} has metrics yet")
    return average(condition, sides)


def winner(metric: str, a: float | None, b: float | None) -> str:
    """`<` when A is better, `>` when B is, `=` within TIE, empty when either is missing."""
    if a is None or b is None:
        return ""
    if abs(a - b) <= TIE:
        return "="
    a_better = a < b if metric in LOWER_IS_BETTER else a > b
    return "<" if a_better else ">"


def _union(keys: Iterable[Iterable[str]]) -> list[str]:
    """Keys in first-seen order."""
    return list(dict.fromkeys(k for group in keys for k in group))


def compare(a: Side, b: Side) -> dict[str, Any]:
    names = _union([a.final, b.final])
    final_a, final_b = ({k: side.final.get(k) for k in names} for side in (a, b))
    winners = {k: winner(k, final_a[k], final_b[k]) for k in names}
    winners.update({k: winner(k, a.perf.get(k), b.perf.get(k)) for k in sorted(set(a.perf) | set(b.perf))})
    return {
        "label_a": a.label, "label_b": b.label,
        "final_a": final_a, "final_b": final_b,
        "perf_a": a.perf, "perf_b": b.perf,
        "wall_time_a": a.wall_time_s, "wall_time_b": b.wall_time_s,
        "steps_a": a.steps, "steps_b": b.steps,
        "runs_a": a.runs, "runs_b": b.runs,
        "curve_a": a.curve, "curve_b": b.curve,
        "winners": winners,
    }
