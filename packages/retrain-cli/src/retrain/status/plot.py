"""Reward, loss and throughput curves of several runs in one image (`--plot FILE.png`); a run
that evaluates on held-out problems gets its pass@1 (eval.jsonl) drawn dashed beside its
training reward.

matplotlib is an optional dependency (the `plot` extra); it is imported only here, through
its object API (no pyplot global state), with the backend chosen by the file extension.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from retrain.errors import UserError
from retrain.io import layout
from retrain.metrics.scan import scan_metrics_file

PLOT_HINT = "install matplotlib (pip install 'retrain-cli[plot]')"
#: (metrics field, axis title)
PANELS = (
    ("mean_reward", "reward (mean)"),
    ("loss", "loss"),
    ("tokens_per_second", "throughput (tokens/s)"),
)
PLOT_FIELDS = tuple(name for name, _ in PANELS)
#: eval.jsonl's curve, drawn on the reward panel
EVAL_FIELD = "eval/pass@1"
_MAX_LEGEND = 12

Series = dict[str, list[tuple[int, float]]]


@dataclass(frozen=True)
class Curves:
    label: str
    series: Series


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UserError(PLOT_HINT) from None


def eval_series(run_dir: Path) -> list[tuple[int, float]]:
    """Held-out pass@1 by RL steps done; empty when the run does not evaluate."""
    return scan_metrics_file(run_dir / layout.EVAL, series_fields=(EVAL_FIELD,)).series[EVAL_FIELD]


def run_curves(run_dir: Path, label: str) -> Curves:
    scan = scan_metrics_file(run_dir / layout.METRICS, series_fields=PLOT_FIELDS)
    return Curves(label, {**scan.series, EVAL_FIELD: eval_series(run_dir)})


def write_plot(curves: list[Curves], out: Path, title: str) -> None:
    require_matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 8), layout="constrained")
    axes = fig.subplots(len(PANELS), 1, sharex=True)
    for ax, (name, axis_title) in zip(axes, PANELS, strict=True):
        for curve in curves:
            points = curve.series.get(name) or []
            line = None
            if points:
                (line,) = ax.plot([s for s, _ in points], [v for _, v in points], label=curve.label, linewidth=1.2)
            held = (curve.series.get(EVAL_FIELD) or []) if name == "mean_reward" else []
            if held:
                ax.plot([s for s, _ in held], [v for _, v in held], linestyle="--", marker=".", linewidth=1.2,
                        color=line.get_color() if line is not None else None, label=f"{curve.label} held-out pass@1")
        if name == "mean_reward" and any(c.series.get(EVAL_FIELD) for c in curves):
            axis_title += " / held-out pass@1 (dashed)"
        ax.set_ylabel(axis_title)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("step")
    fig.suptitle(title)
    if 0 < len(curves) <= _MAX_LEGEND:
        axes[0].legend(fontsize="small", loc="best")
    try:
        fig.savefig(out)
    except (ValueError, OSError) as exc:
        raise UserError(f"cannot write plot {out}: {exc}") from None
