"""One run's performance summary from its metrics file, and the spread over repeats.

Per run: steps, wall time (Σ step_time_s), mean / median / p95 step time (p95 = the sorted
value at index int(0.95·(n-1))), mean sample and train time and shares, mean tokens per step
and per second, peak RSS, the size of generations.jsonl, the final loss / mean_reward /
correct_rate, and the process wall time (start-up and model load included) when the
benchmark measured it. Over repeats, every numeric field gets mean, population stdev, min
and max; `mean_train_time_s` leaves out runs whose train time is only a submit latency.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from retrain.io import layout
from retrain.metrics.scan import iter_jsonl_objects, number

MEANS = ("sample_time_s", "train_time_s", "sample_share", "train_share", "tokens_per_step", "tokens_per_second")
FINALS = ("loss", "mean_reward", "correct_rate")
SUBMIT_LATENCY = "submit_enqueue_latency"


def run_summary(run_dir: Path, label: str = "", process_wall_s: float | None = None) -> dict[str, Any]:
    rows = [r for r in iter_jsonl_objects(run_dir / layout.METRICS) if r.get("phase") != "sft"]
    times = sorted(t for r in rows if (t := number(r.get("step_time_s"))) is not None)
    out: dict[str, Any] = {"label": label or run_dir.name, "path": str(run_dir), "steps": len(rows),
                           "wall_time_s": sum(times)}
    if times:
        out.update(mean_step_time_s=sum(times) / len(times), median_step_time_s=statistics.median(times),
                   p95_step_time_s=times[int(0.95 * (len(times) - 1))])
    for name in MEANS:
        values = [v for r in rows if (v := number(r.get(name))) is not None]
        if values:
            out[f"mean_{name}"] = sum(values) / len(values)
    semantics = {r.get("train_time_semantics") for r in rows} - {None}
    if semantics:
        out["train_time_semantics"] = ",".join(sorted(map(str, semantics)))
    rss = [v for r in rows if (v := number(r.get("process_max_rss_mb"))) is not None]
    if rss:
        out["peak_process_max_rss_mb"] = max(rss)
    generations = run_dir / layout.GENERATIONS
    out["generations_bytes"] = generations.stat().st_size if generations.exists() else 0
    last = rows[-1] if rows else {}
    for name in FINALS:
        value = number(last.get(name))
        if value is not None:
            out[f"final_{name}"] = value
    if process_wall_s is not None:
        out["process_wall_s"] = process_wall_s
    return out


def aggregate(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    fields = [k for k in runs[0] if isinstance(runs[0][k], int | float) and not isinstance(runs[0][k], bool)] \
        if runs else []
    for run in runs[1:]:
        fields += [k for k in run if k not in fields and isinstance(run[k], int | float)]
    out = {}
    for name in fields:
        chosen = runs
        if name == "mean_train_time_s":
            chosen = [r for r in runs if r.get("train_time_semantics") != SUBMIT_LATENCY]
        values = [float(r[name]) for r in chosen if isinstance(r.get(name), int | float)
                  and math.isfinite(float(r[name]))]
        if values:
            out[name] = {"mean": statistics.fmean(values), "stdev": statistics.pstdev(values),
                         "minimum": min(values), "maximum": max(values)}
    return out
