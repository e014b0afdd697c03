"""Comparing two runs, or two conditions of a campaign averaged over their seeds.

Reads every metrics row (one pass per run), RL rows and supervised warmup rows (phase "sft",
their own step counter) apart: finals from the last RL row (and `sft_loss` from the last
warmup row), RL steps and warmup steps each as `retrain status` counts them (the last row's
step + 1), wall time as the sum of every row's step time, per-step correct-rate curves and
performance means over the RL rows (the warmup rows' for a run with no RL row). A run that
evaluates adds the metrics of its last held-out evaluation (eval.jsonl) to its finals; one that
distils, its last step's mean KL to the teacher (`teacher/kl`, lower is nearer), and the mean
of the teacher's time per step to its performance.

A side wins a metric only when the metric has a direction (DIRECTIONS); loss, time shares and
the other metrics are shown without a winner.
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
from retrain.metrics.scan import last_row, number, scan_phases
from retrain.status.plot import EVAL_FIELD, PLOT_FIELDS, SFT_LOSS, eval_series
from retrain.status.scan import resolve_log_dir

FINAL_FIELDS = ("loss", "correct_rate", "mean_reward")
SERIES_FIELDS = (*PLOT_FIELDS, EVAL_FIELD, SFT_LOSS)
MEAN_FIELDS = ("step_time_s", "sample_time_s", "train_time_s", "tokens_per_second", "sample_share", "train_share",
               "train_tokens_per_s", "mfu", "teacher/time_s")
#: on-policy distillation's: in the finals of a run whose rows have it ([teacher])
TEACHER_KL = "teacher/kl"
PEAK_FIELD = "process_max_rss_mb"
CURVE_FIELD = "correct_rate"
HIGHER, LOWER = 1, -1
#: The metrics with a better side: HIGHER or LOWER is better. Every other metric (loss, time
#: shares, sample and train times, sft_loss) has no direction and no winner.
DIRECTIONS: dict[str, int] = {
    "mean_reward": HIGHER,
    "correct_rate": HIGHER,
    "eval/mean_reward": HIGHER,
    "eval/pass@": HIGHER,  # every k
    "eval/maj@": HIGHER,
    "mean_step_time_s": LOWER,
    "mean_tokens_per_second": HIGHER,
    "mean_train_tokens_per_s": HIGHER,
    "mean_mfu": HIGHER,
    "peak_process_max_rss_mb": LOWER,
    TEACHER_KL: LOWER,  # nearer the teacher
}
TIE = 1e-9


@dataclass
class Side:
    label: str
    final: dict[str, float | None]
    perf: dict[str, float]
    wall_time_s: float
    #: RL steps done; warmup (SFT) steps done, counted apart
    steps: int
    curve: list[float]
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    runs: int = 1
    sft_steps: int = 0


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
    rl, sft = scan_phases(metrics, mean_fields=MEAN_FIELDS, max_fields=(PEAK_FIELD,),
                          series_fields=(*PLOT_FIELDS, CURVE_FIELD))
    timed = rl if rl.rows or not sft.rows else sft
    perf = {f"mean_{name}": value for name, value in timed.means.items()}
    if PEAK_FIELD in timed.maxima:
        perf[f"peak_{PEAK_FIELD}"] = timed.maxima[PEAK_FIELD]
    last = rl.last or {}
    final = {name: number(last.get(name)) for name in FINAL_FIELDS}
    if sft.last is not None:
        final[SFT_LOSS] = number(sft.last.get("loss"))
    if TEACHER_KL in last:
        final[TEACHER_KL] = number(last.get(TEACHER_KL))
    return Side(
        label=label or str(path),
        final={**final, **held_out_finals(metrics.parent)},
        perf=perf,
        wall_time_s=rl.wall_time_s + sft.wall_time_s,
        steps=rl.steps_done,
        curve=[v for _, v in rl.series.get(CURVE_FIELD, [])],
        series={**{name: rl.series.get(name, []) for name in PLOT_FIELDS}, EVAL_FIELD: eval_series(metrics.parent),
                SFT_LOSS: sft.series.get("loss", [])},
        sft_steps=sft.steps_done,
    )


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def average(label: str, sides: list[Side]) -> Side:
    """Seeds of one condition: means of finals, perf and wall time; curves averaged per index
    (ragged lengths allowed), series per step; RL and warmup steps as rounded means."""
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
        sft_steps=round(sum(s.sft_steps for s in sides) / len(sides)),
    )


def load_condition(campaign: Path, condition: str) -> Side:
    manifest = load_json_object(campaign / layout.CAMPAIGN_MANIFEST)
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


def direction(metric: str) -> int | None:
    """HIGHER or LOWER from DIRECTIONS (an entry ending in `@` covers every k); None when the
    metric has no better side."""
    if "@" in metric:
        return DIRECTIONS.get(metric.rpartition("@")[0] + "@")
    return DIRECTIONS.get(metric)


def winner(metric: str, a: float | None, b: float | None) -> str:
    """`<` when A is better, `>` when B is, `=` within TIE; empty when either is missing or the
    metric has no direction."""
    sign = direction(metric)
    if a is None or b is None or sign is None:
        return ""
    if abs(a - b) <= TIE:
        return "="
    return "<" if (a - b) * sign > 0 else ">"


def _union(keys: Iterable[Iterable[str]]) -> list[str]:
    """Keys in first-seen order."""
    return list(dict.fromkeys(k for group in keys for k in group))


def compare(a: Side, b: Side) -> dict[str, Any]:
    names = _union([a.final, b.final])
    final_a, final_b = ({k: side.final.get(k) for k in names} for side in (a, b))
    winners = {k: winner(k, final_a[k], final_b[k]) for k in names if direction(k) is not None}
    winners.update({k: winner(k, a.perf.get(k), b.perf.get(k)) for k in sorted(set(a.perf) | set(b.perf))
                    if direction(k) is not None})
    return {
        "label_a": a.label, "label_b": b.label,
        "final_a": final_a, "final_b": final_b,
        "perf_a": a.perf, "perf_b": b.perf,
        "wall_time_a": a.wall_time_s, "wall_time_b": b.wall_time_s,
        "steps_a": a.steps, "steps_b": b.steps,
        "sft_steps_a": a.sft_steps, "sft_steps_b": b.sft_steps,
        "runs_a": a.runs, "runs_b": b.runs,
        "curve_a": a.curve, "curve_b": b.curve,
        "winners": winners,
    }
