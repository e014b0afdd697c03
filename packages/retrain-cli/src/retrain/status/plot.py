"""Reward, loss and throughput curves of several runs in one image (`--plot FILE.png`); a run
that evaluates on held-out problems gets its pass@1 (eval.jsonl) drawn dashed beside its
training reward. RL panels share the RL step axis; supervised warmup rows (phase "sft", their
own step counter) get a panel of their own on the SFT step axis, drawn when some run has them.

matplotlib is an optional dependency (the `plot` extra); it is imported only here, through
its object API (no pyplot global state), with the backend chosen by the file extension.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from retrain.errors import UserError
from retrain.io import layout
from retrain.metrics.scan import scan_metrics_file, scan_phases
from retrain.registry.health import COMPONENTS

PLOT_HINT = f"install matplotlib ({COMPONENTS['matplotlib'].hint})"
#: (metrics field, axis title)
PANELS = (
    ("mean_reward", "reward (mean)"),
    ("loss", "loss"),
    ("tokens_per_second", "throughput (tokens/s)"),
)
PLOT_FIELDS = tuple(name for name, _ in PANELS)
#: eval.jsonl's curve, drawn on the reward panel
EVAL_FIELD = "eval/pass@1"
#: warmup (SFT) rows' loss by SFT step, and its panel
SFT_LOSS = "sft_loss"
SFT_PANEL = (SFT_LOSS, "warmup (SFT) loss")
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
    rl, sft = scan_phases(run_dir / layout.METRICS, series_fields=PLOT_FIELDS)
    return Curves(label, {**rl.series, SFT_LOSS: sft.series["loss"], EVAL_FIELD: eval_series(run_dir)})


def panels(curves: list[Curves]) -> list[tuple[str, str]]:
    """(series, axis title) of each panel: the warmup panel first when some run has warmup rows."""
    return [SFT_PANEL, *PANELS] if any(c.series.get(SFT_LOSS) for c in curves) else list(PANELS)


def write_plot(curves: list[Curves], out: Path, title: str) -> Path:
    """Writes the image; returns its absolute path (the commands print it)."""
    require_matplotlib()
    from matplotlib.figure import Figure

    shown = panels(curves)
    fig = Figure(figsize=(9, 2.7 * len(shown)), layout="constrained")
    axes = list(fig.subplots(len(shown), 1))
    rl_axes = axes[len(shown) - len(PANELS):]
    for ax in rl_axes[1:]:
        ax.sharex(rl_axes[0])
    if len(shown) > len(PANELS):
        axes[0].set_xlabel("SFT step")
    for ax, (name, axis_title) in zip(axes, shown, strict=True):
        for i, curve in enumerate(curves):
            color = f"C{i % 10}"  # a run keeps its colour on every panel, drawn there or not
            points = curve.series.get(name) or []
            if points:
                ax.plot([s for s, _ in points], [v for _, v in points], label=curve.label, linewidth=1.2, color=color)
            held = (curve.series.get(EVAL_FIELD) or []) if name == "mean_reward" else []
            if held:
                ax.plot([s for s, _ in held], [v for _, v in held], linestyle="--", marker=".", linewidth=1.2,
                        color=color, label=f"{curve.label} held-out pass@1")
        if name == "mean_reward" and any(c.series.get(EVAL_FIELD) for c in curves):
            axis_title += " / held-out pass@1 (dashed)"
        ax.set_ylabel(axis_title)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("RL step")
    fig.suptitle(title)
    if 0 < len(curves) <= _MAX_LEGEND:
        rl_axes[0].legend(fontsize="small", loc="best")
    try:
        fig.savefig(out)
    except (ValueError, OSError) as exc:
        raise UserError(f"cannot write plot {out}: {exc}") from None
    return out.resolve()
