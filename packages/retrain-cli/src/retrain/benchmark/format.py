"""Benchmark results as text: one run's fields, or a suite's spread over repeats."""

from __future__ import annotations

from typing import Any

#: the rows worth reading first, in this order; the others follow alphabetically
FIRST = ("process_wall_s", "wall_time_s", "mean_step_time_s", "median_step_time_s", "p95_step_time_s",
         "mean_tokens_per_second", "final_mean_reward", "final_correct_rate", "peak_process_max_rss_mb")


def _order(names: list[str]) -> list[str]:
    return [n for n in FIRST if n in names] + sorted(n for n in names if n not in FIRST)


def _num(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"


def format_run(summary: dict[str, Any]) -> str:
    lines = [f"{summary['label']}  ({summary['path']})"]
    for name in _order(list(summary)):
        value = summary[name]
        if name in ("label", "path"):
            continue
        lines.append(f"  {name:<32} {_num(value) if isinstance(value, int | float) else value}")
    return "\n".join(lines)


def format_suite(label: str, runs: list[dict[str, Any]], stats: dict[str, dict[str, float]]) -> str:
    lines = [f"{label}: {len(runs)} repeat{'s' * (len(runs) != 1)}",
             f"  {'metric':<32} {'mean':>10} {'stdev':>10} {'min':>10} {'max':>10}"]
    for name in _order([n for n in stats if n != "steps"]):
        s = stats[name]
        lines.append(f"  {name:<32} {_num(s['mean']):>10} {_num(s['stdev']):>10} {_num(s['minimum']):>10} "
                     f"{_num(s['maximum']):>10}")
    return "\n".join(lines)
