"""Reward, loss and throughput curves of several runs in one image (`--plot FILE.png`).

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


def run_curves(run_dir: Path, label: str) -> Curves:
    scan = scan_metrics_file(run_dir / layout.METRICS, series_fields=PLOT_FIELDS)
    return Curves(label, scan.series)


def write_plot(curves: list[Curves], out: Path, title: str) -> None:
    require_matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 8), layout="constrained")
    axes = fig.subplots(len(PANELS), 1, sharex=True)
    for ax, (name, axis_title) in zip(axes, PANELS, strict=True):
        for curve in curves:
            points = curve.series.get(name) or []
            if points:
                ax.plot([s for s, _ in points], [v for _, v in points], label=curve.label, linewidth=1.2)
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
