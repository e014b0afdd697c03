"""Text rendering of a status report: a banner, campaign matrices, one line per standalone run.

Progress is shown as steps done (`step + 1` of the last row, 0-based) out of max_steps;
`pass@1=0.700@400` is the latest held-out pass@1, measured after 400 RL steps.
`time_in_steps=` is the sum of the rows' step times (`RunSummary.wall_time_s`), not the run's
wall time: loading the model, evaluation and checkpoints are not in it. A campaign
matrix cell is the run's matrix number (held-out pass@1 or final reward, see status.scan)
with its state, and each condition ends with the mean ± std over its finished seeds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from retrain.status.report import (
    PASS_AT_1,
    STATES,
    CampaignSummary,
    CellStats,
    RunSummary,
    StatusReport,
)

LABEL_WIDTH = 30
CAMPAIGN_STATUSES = ("running", "partial", "done", "dead")
LEGEND = "✓ finished   ✗ failed/dead   ‖ interrupted (resumable)   N/M steps done (running)   ~ stale   — not started"
MATRIX_TITLES = {PASS_AT_1: "held-out pass@1 (latest evaluation)",
                 "mean_reward": "final reward (mean reward of the last RL step)"}


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _counts(counter: Counter[str], order: tuple[str, ...], empty: str) -> str:
    parts = [f"{counter[name]} {name}" for name in order if counter[name]]
    return ", ".join(parts) if parts else empty


def banner(report: StatusReport) -> str:
    campaigns = _counts(Counter(c.status for c in report.campaigns), CAMPAIGN_STATUSES, "0 campaigns")
    runs = _counts(Counter(r.state for r in report.all_runs()), STATES, "0 runs")
    return f"Campaigns: {campaigns}  |  Runs: {runs}"


def truncate_left(label: str, width: int = LABEL_WIDTH) -> str:
    return label if len(label) <= width else "…" + label[-(width - 1):]


def cell(run: RunSummary | None, value: float | None) -> str:
    """`value` (the run's matrix number) and the run's state: ✓, ✗, or steps done while it runs."""
    if run is None or run.step is None:
        return "—"
    shown = "-" if value is None else f"{value:.3f}"
    if run.state == "finished":
        return f"{shown} ✓"
    if run.state in ("failed", "dead"):
        return f"{shown} ✗"
    if run.state == "interrupted":
        return f"{shown} ‖"
    progress = f"{run.steps_done}/{run.max_steps}" if run.max_steps else f"{run.steps_done}"
    return f"{shown} {progress}" + (" ~" if run.state == "stale" else "")


def spread(stats: CellStats | None, seeds: int) -> str:
    """Mean ± std over the finished seeds, with how many when not all seeds finished."""
    if stats is None:
        return "-"
    text = f"{stats.mean:.3f} ± {stats.std:.3f}"
    return text if stats.n == seeds else f"{text} ({stats.n} of {seeds})"


def campaign_block(c: CampaignSummary, now: float) -> list[str]:
    name = c.path.rstrip("/").rsplit("/", 1)[-1]
    status = c.status + (f", {c.failed} failed" if c.failed else "")
    lines = [f"{name}  [{status}]  {c.path}"]
    run_time = sum(r.wall_time_s or 0.0 for r in c.runs)
    idle = None if c.last_activity is None else now - c.last_activity
    lines.append(f"  {len(c.conditions)} conditions x {len(c.seeds)} seeds = {c.num_runs} runs  "
                 f"max_steps={c.max_steps or '-'}  time in steps: {duration(run_time)} (sum over runs)  "
                 f"last write: {duration(idle)} ago")
    if c.error:
        lines.append(f"  warning: {c.error}")
    lines.append(f"  cells: {MATRIX_TITLES.get(c.matrix_metric, c.matrix_metric)}; "
                 "mean ± std over finished seeds")
    by_key = {(r.condition, r.seed): r for r in c.runs}
    cells = {cond: [cell(by_key.get((cond, seed)), c.matrix.get(cond, {}).get(str(seed))) for seed in c.seeds]
             for cond in c.conditions}
    spreads = {cond: spread(c.matrix_stats.get(cond), len(c.seeds)) for cond in c.conditions}
    width = max([8, *(len(x) for row in cells.values() for x in row), *(len(f"s{s}") for s in c.seeds)])
    spread_width = max([10, *(len(x) for x in spreads.values())])
    label_width = max([9, *(len(truncate_left(cond)) for cond in c.conditions)])
    lines.append("  " + "condition".ljust(label_width) + "".join(f"  {'s' + str(s):>{width}}" for s in c.seeds)
                 + f"  {'mean ± std':>{spread_width}}")
    for cond in c.conditions:
        lines.append("  " + truncate_left(cond).ljust(label_width)
                     + "".join(f"  {x:>{width}}" for x in cells[cond]) + f"  {spreads[cond]:>{spread_width}}")
    lines.append("  " + LEGEND)
    return lines


def held_out(r: RunSummary) -> str:
    """The latest held-out pass@1 and after how many RL steps ("-" for a run that does not
    evaluate)."""
    if r.eval_pass_at_1 is None:
        return "-"
    return f"{r.eval_pass_at_1:.3f}@{r.eval_step}"


def run_line(r: RunSummary) -> str:
    progress = "-" if r.step is None else (f"{r.steps_done}/{r.max_steps}" if r.max_steps else f"{r.steps_done}")
    wall = duration(r.wall_time_s) + ("~" if r.wall_time_estimated else "")
    parts = [r.path, r.condition or "-", f"step={progress}", f"cr={_pct(r.correct_rate)}",
             f"reward={_num(r.mean_reward)}", f"loss={_num(r.loss)}", f"pass@1={held_out(r)}",
             f"time_in_steps={wall}", f"[{r.state}]"]
    enqueue = r.train_submit_enqueue_share if r.train_share is None else None
    optional: tuple[tuple[str, object, Callable[[Any], str]], ...] = (
        ("tok/s", r.tokens_per_second, lambda v: f"{v:.0f}"),
        ("train_tok/s", r.train_tokens_per_s, lambda v: f"{v:.0f}"),
        ("mfu", r.mfu, _pct),
        ("sample", r.sample_share, _pct),
        ("train", r.train_share, _pct),
        ("enqueue", enqueue, _pct),
        ("step_t", r.latest_step_time_s, lambda v: f"{v:.2f}s"),
        ("rss", r.process_max_rss_mb, lambda v: f"{v:.0f}MB"),
        ("teacher_kl", r.teacher_kl, lambda v: f"{v:.4f}"),
        ("teacher_t", r.teacher_time_s, lambda v: f"{v:.2f}s"),
        ("pid", r.pid, lambda v: f"{v}{'' if r.alive else ' (gone)'}"),
        ("trainer", r.trainer, str),
        ("resume", r.resume_mode, str),
        ("resume_warning", r.resume_warning, str),
        ("failure", r.failure, str),
        ("warning", r.warning, str),
    )
    parts += [f"{key}={show(value)}" for key, value, show in optional if value not in (None, "")]
    return "  " + "  ".join(parts)


def render(report: StatusReport, *, hidden: int = 0) -> str:
    lines = [banner(report)]
    for c in report.campaigns:
        lines += ["", *campaign_block(c, report.generated_at)]
    if report.runs:
        lines += ["", "Standalone runs:", *(run_line(r) for r in report.runs)]
    if hidden:
        lines += ["", f"({hidden} idle campaign{'s' if hidden != 1 else ''} hidden; --all shows them)"]
    if not report.campaigns and not report.runs:
        lines += ["", f"No runs under {report.root}."]
    return "\n".join(lines)
