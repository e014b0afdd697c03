"""Text rendering of a comparison: finals with a win column, performance, sparklines.

Both sparklines of a metric share one scale from zero (or the lowest value, when below zero),
so their heights compare across A and B and a zero draws empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from retrain.diff.compute import DIRECTIONS, HIGHER
from retrain.status.format import duration

BARS = " ▁▂▃▄▅▆▇█"
SPARK_WIDTH = 20
_WIN_TEXT = {"<": "A", ">": "B", "=": "=", "": ""}


def _legend() -> str:
    higher = ", ".join(k + ("k" if k.endswith("@") else "") for k, v in DIRECTIONS.items() if v == HIGHER)
    lower = ", ".join(k for k, v in DIRECTIONS.items() if v != HIGHER)
    return (f"win: A/B = better side, = tie, only for metrics with a direction (higher: {higher}; "
            f"lower: {lower}); the others have no winner")


WIN_LEGEND = _legend()


def buckets(values: Sequence[float], width: int = SPARK_WIDTH) -> list[float]:
    """Averages of `width` contiguous buckets (fewer when there are fewer values)."""
    if len(values) <= width:
        return list(values)
    out = []
    for i in range(width):
        chunk = values[i * len(values) // width:(i + 1) * len(values) // width]
        out.append(sum(chunk) / len(chunk))
    return out


def sparkline(values: Sequence[float], lo: float, hi: float, width: int = SPARK_WIDTH) -> str:
    """One bar per bucket, `lo` drawn empty and `hi` full; an empty scale (lo == hi) draws empty."""
    span = hi - lo
    top = len(BARS) - 1
    return "".join(BARS[0 if span <= 0 else round((v - lo) / span * top)] for v in buckets(values, width))


def _value(v: float | None, name: str) -> str:
    if v is None:
        return "-"
    if name.endswith(("share", "correct_rate")):
        return f"{v * 100:.1f}%"
    return f"{v:.4g}"


def _rows(result: dict[str, Any], names: Sequence[str], key_a: str, key_b: str) -> list[tuple[str, str, str, str]]:
    return [(name, _value(result[key_a].get(name), name), _value(result[key_b].get(name), name),
             _WIN_TEXT[result["winners"].get(name, "")]) for name in names]


def _table(rows: list[tuple[str, str, str, str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return ["  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths, strict=True))).rstrip()
            for r in rows]


def render(result: dict[str, Any]) -> str:
    a_runs = f" ({result['runs_a']} runs)" if result["runs_a"] > 1 else ""
    b_runs = f" ({result['runs_b']} runs)" if result["runs_b"] > 1 else ""
    lines = [f"A: {result['label_a']}{a_runs}", f"B: {result['label_b']}{b_runs}", ""]
    head = [("metric", "A", "B", "win")]
    finals = _rows(result, list(result["final_a"]), "final_a", "final_b")
    totals = [("RL steps", str(result["steps_a"]), str(result["steps_b"]), "")]
    if result["sft_steps_a"] or result["sft_steps_b"]:
        totals.append(("SFT steps", str(result["sft_steps_a"]), str(result["sft_steps_b"]), ""))
    totals.append(("wall time", duration(result["wall_time_a"]), duration(result["wall_time_b"]), ""))
    lines += _table(head + finals + totals)
    perf_names = sorted(set(result["perf_a"]) | set(result["perf_b"]))
    if perf_names:
        lines += ["", "Performance:", *_table(_rows(result, perf_names, "perf_a", "perf_b"))]
    curve_a, curve_b = result["curve_a"], result["curve_b"]
    if curve_a or curve_b:
        both = [*curve_a, *curve_b]
        lo, hi = min(0.0, *both), max(both)
        lines += ["", f"correct_rate per step (shared scale {lo * 100:.1f}%–{hi * 100:.1f}%):",
                  f"  A {sparkline(curve_a, lo, hi)}", f"  B {sparkline(curve_b, lo, hi)}"]
    lines += ["", WIN_LEGEND]
    return "\n".join(lines)

