"""Scanning a log root: standalone runs and campaigns (condition x seed matrices).

Reads only what a status line needs: the newest rows of `metrics.jsonl` and the last row of
`eval.jsonl` (tail reads from the file end, never the history), `trainer_state.json`,
`run_meta.json` and `run.pid`. Every file may be missing, half-written or torn; a damaged
file counts as absent.

Run states: `finished` (final checkpoint, or run_meta status "succeeded"), `failed` (run_meta
status "failed" or a non-zero campaign return code), `interrupted` (stopped at a Ctrl-C after
saving a checkpoint: run_meta status "interrupted"), `dead` (its pid is gone), `stale` (no
metrics write for STALE_AFTER_S), `pending` (nothing written yet, no live pid), `running`.

A campaign's matrix holds one number per run: its latest held-out pass@1 when some run of the
campaign evaluates, else the mean reward of its last RL step; `matrix_stats` are the mean and
sample std of that number over each condition's finished runs.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from retrain.evaluation.row import EvalRow
from retrain.io import layout
from retrain.io.json import load_json_object
from retrain.metrics.scan import Tail, number, read_tail, row_step_time
from retrain.status.pid import pid_alive, read_pid
from retrain.status.report import (
    ENDED,
    PASS_AT_1,
    REWARD,
    STATES,
    CampaignSummary,
    CellStats,
    RunSummary,
    StatusReport,
)
from retrain.training.idle import IdleSteps

STALE_AFTER_S = 300.0
#: The default view hides ended campaigns idle for longer than this.
HIDE_IDLE_AFTER_S = 24 * 3600.0
TAIL_ROWS = 16
_SKIP_DIRS = frozenset({layout.WANDB_DIR, layout.TENSORBOARD_DIR, layout.MLFLOW_DIR, layout.EMERGENCE_DIR,
                        "__pycache__"})
_RUN_NAME = re.compile(r"^(?P<label>.+)_s(?P<seed>-?\d+)$")


@dataclass(frozen=True)
class Scope:
    """The log root, and whether reads are confined to it (the exporter's mode)."""

    root: Path
    confined: bool = False

    @functools.cached_property
    def real_root(self) -> str:
        return os.path.realpath(self.root)

    def allows(self, path: Path) -> bool:
        if not self.confined:
            return True
        real = os.path.realpath(path)
        return real == self.real_root or real.startswith(self.real_root + os.sep)

    def json(self, path: Path) -> dict[str, Any]:
        return (load_json_object(path) if self.allows(path) else None) or {}

    def tail(self, path: Path, rows: int = TAIL_ROWS) -> Tail:
        return read_tail(path, rows) if self.allows(path) else Tail([], True, 0, None)

    def run_id(self, path: Path) -> str:
        return Path(os.path.relpath(path, self.root)).as_posix()


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _max_steps(meta: dict[str, Any]) -> int | None:
    """run_meta.json's `max_steps`, or its config snapshot's (flat, or by TOML section)."""
    config = meta.get("config")
    config = config if isinstance(config, dict) else {}
    training = config.get("training")
    training = training if isinstance(training, dict) else {}
    for value in (meta.get("max_steps"), config.get("max_steps"), training.get("max_steps")):
        steps = _int(value)
        if steps:
            return steps
    return None


def _wall_time(tail: Tail, steps_done: int | None) -> tuple[float | None, bool]:
    """Exact sum of step times when the tail holds the whole file; else the tail's mean step
    time times the steps done (a status line must not read the history)."""
    times = [t for t in map(row_step_time, tail.rows) if t is not None]
    if not times:
        return None, False
    if tail.whole_file:
        return sum(times), False
    return sum(times) / len(times) * (steps_done or len(times)), True


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _outcome(state_file: dict[str, Any], meta: dict[str, Any], returncode: int | None) -> tuple[bool, bool, bool]:
    """(completed, interrupted, failed): at most one holds, in that order of precedence."""
    completed = state_file.get("checkpoint_name") == "final" or meta.get("status") == "succeeded"
    interrupted = not completed and meta.get("status") == "interrupted"
    failed = not completed and not interrupted and (meta.get("status") == "failed" or returncode not in (None, 0))
    return completed, interrupted, failed


def _run_state(completed: bool, interrupted: bool, failed: bool, alive: bool | None, age: float | None) -> str:
    if completed:
        return "finished"
    if interrupted:
        return "interrupted"
    if failed:
        return "failed"
    if alive is False:
        return "dead"
    if age is None:
        return "running" if alive else "pending"
    if age > STALE_AFTER_S:
        return "stale"
    return "running"


def _failure(meta: dict[str, Any], returncode: int | None) -> str | None:
    why = " ".join(m for m in (_str(meta.get("failure_status")), _str(meta.get("error_message"))) if m)
    return _shorten(why) or (f"exit_code:{returncode}" if returncode not in (None, 0) else None)


def _idle_warning(state_file: dict[str, Any]) -> str | None:
    """The trainer state's verdict on RL steps that trained nothing (None: most trained, or a
    state that does not count them)."""
    try:
        idle = msgspec.convert(state_file.get("idle") or {}, IdleSteps)
    except msgspec.ValidationError:
        return None
    return idle.verdict()


def _last_row_fields(last: dict[str, Any]) -> dict[str, Any]:
    """The RunSummary fields read from the newest metrics row."""
    return {
        "phase": _str(last.get("phase")),
        "correct_rate": number(last.get("correct_rate")),
        "loss": number(last.get("loss")),
        "mean_reward": number(last.get("mean_reward")),
        "latest_step_time_s": row_step_time(last),
        "tokens_per_second": number(last.get("tokens_per_second")),
        "train_tokens_per_s": number(last.get("train_tokens_per_s")),
        "mfu": number(last.get("mfu")),
        "sample_share": number(last.get("sample_share")),
        "train_share": number(last.get("train_share")),
        "train_time_semantics": _str(last.get("train_time_semantics")),
        "train_submit_enqueue_time_s": number(last.get("train_submit_enqueue_time_s")),
        "train_submit_enqueue_share": number(last.get("train_submit_enqueue_share")),
        "process_max_rss_mb": number(last.get("process_max_rss_mb")),
        "teacher_kl": number(last.get("teacher/kl")),
        "teacher_time_s": number(last.get("teacher/time_s")),
    }


def _eval_fields(evaluation: EvalRow | None) -> dict[str, Any]:
    """The RunSummary fields read from the last eval.jsonl row (all None without one)."""
    return {
        "eval_step": evaluation.step if evaluation else None,
        "eval_k": evaluation.k if evaluation else None,
        "eval_pass_at_1": evaluation.pass_at_1 if evaluation else None,
        "eval_pass_at_k": evaluation.pass_at_k if evaluation else None,
        "eval_mean_reward": evaluation.mean_reward if evaluation else None,
    }


def scan_run(
    path: Path,
    scope: Scope,
    *,
    now: float,
    max_steps: int | None = None,
    condition: str | None = None,
    seed: int | None = None,
    returncode: int | None = None,
) -> RunSummary:
    tail = scope.tail(path / layout.METRICS)
    state_file = scope.json(path / layout.TRAINER_STATE)
    meta = scope.json(path / layout.RUN_META)
    last = tail.last or {}
    evaluation = EvalRow.from_dict(scope.tail(path / layout.EVAL, 1).last or {})
    pid, pid_written = read_pid(path, scope.allows)
    alive = pid_alive(pid, pid_written) if pid is not None else None

    completed, interrupted, failed = _outcome(state_file, meta, returncode)
    step = _int(last.get("step"))
    if completed and _int(state_file.get("step")) is not None:
        max_steps = state_file["step"] + 1
    age = None if tail.mtime is None else max(0.0, now - tail.mtime)
    wall, estimated = _wall_time(tail, None if step is None else step + 1)
    state = _run_state(completed, interrupted, failed, alive, age)
    return RunSummary(
        run=scope.run_id(path),
        path=str(path),
        state=state,
        condition=_str(last.get("condition")) or condition,
        seed=seed,
        step=step,
        max_steps=max_steps or _max_steps(meta),
        wall_time_s=wall,
        wall_time_estimated=estimated,
        completed=completed,
        failed=failed,
        stale=state == "stale",
        pid=pid,
        alive=alive,
        trainer=_str(meta.get("trainer")),
        failure=_failure(meta, returncode) if failed else None,
        warning=_idle_warning(state_file),
        resume_mode=_str(state_file.get("resume_mode")),
        resume_warning=_str(state_file.get("resume_warning")),
        last_update=tail.mtime,
        age_s=age,
        **_last_row_fields(last),
        **_eval_fields(evaluation),
    )


def resolve_log_dir(campaign: Path, entry: dict[str, Any],
                    allows: Callable[[Path], bool] = lambda p: True) -> Path | None:
    """Where a manifest run lives. Campaign launchers record log dirs relative to the cwd they
    ran in, so the campaign's own `runs/<run_name>` is tried first, then the path as written
    (relative to the campaign dir, then as given); candidates `allows` rejects are skipped."""
    name = _str(entry.get("run_name"))
    log_dir = _str(entry.get("log_dir"))
    candidates = [campaign / "runs" / name] if name else []
    if log_dir:
        written = Path(log_dir)
        candidates += [campaign / "runs" / written.name, campaign / written, written]
    candidates = [c for c in candidates if allows(c)]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return candidates[0] if candidates else None


def _entries_without_manifest(campaign: Path) -> list[dict[str, Any]]:
    """Runs of a campaign whose manifest is unreadable: `runs/<label>_s<seed>` folders."""
    try:
        names = sorted(p.name for p in (campaign / "runs").iterdir() if p.is_dir())
    except OSError:
        return []
    entries = []
    for name in names:
        match = _RUN_NAME.match(name)
        entries.append({"run_name": name, "condition": match["label"] if match else name,
                        "seed": int(match["seed"]) if match else None})
    return entries


def campaign_status(runs: Iterable[RunSummary], runner_alive: bool | None) -> str:
    states = [r.state for r in runs]
    if states and all(s in ENDED for s in states):
        return "done"
    waiting = not states or any(s in ("stale", "pending") for s in states)
    if "running" in states or (runner_alive and waiting):
        return "running"
    if any(s in ENDED for s in states):
        return "partial"
    return "dead"


def _manifest_entries(path: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    if not manifest:
        return _entries_without_manifest(path)
    return [e for e in manifest.get("runs", []) if isinstance(e, dict)]


def _campaign_runs(path: Path, scope: Scope, entries: list[dict[str, Any]], *, now: float,
                   max_steps: int | None) -> list[RunSummary]:
    runs: list[RunSummary] = []
    for entry in entries:
        log_dir = resolve_log_dir(path, entry, scope.allows)
        seed = _int(entry.get("seed"))
        condition = _str(entry.get("condition"))
        if log_dir is None:
            continue
        runs.append(scan_run(log_dir, scope, now=now, max_steps=max_steps, condition=condition,
                             seed=seed, returncode=_int(entry.get("returncode"))))
        # The manifest's label wins over a row's: the matrix is keyed by manifest conditions.
        runs[-1].condition = condition or runs[-1].condition
    return runs


def _axes(manifest: dict[str, Any], runs: list[RunSummary]) -> tuple[list[str], list[int]]:
    """The matrix's conditions and seeds: the manifest's, then any only a run names."""
    conditions = [c for c in manifest.get("conditions", []) if isinstance(c, str)]
    seeds = [s for s in manifest.get("seeds", []) if _int(s) is not None]
    for r in runs:
        if r.condition and r.condition not in conditions:
            conditions.append(r.condition)
        if r.seed is not None and r.seed not in seeds:
            seeds.append(r.seed)
    return conditions, seeds


def _matrix(runs: list[RunSummary], conditions: list[str], seeds: list[int]
            ) -> tuple[str, dict[str, dict[str, float | None]], dict[str, CellStats | None]]:
    """(matrix_metric, matrix, matrix_stats)."""
    metric = PASS_AT_1 if any(r.eval_pass_at_1 is not None for r in runs) else REWARD
    matrix: dict[str, dict[str, float | None]] = {c: {str(s): None for s in seeds} for c in conditions}
    finished: dict[str, list[float]] = {c: [] for c in conditions}
    for r in runs:
        value = r.eval_pass_at_1 if metric == PASS_AT_1 else r.mean_reward
        if r.condition and r.seed is not None:
            matrix[r.condition][str(r.seed)] = value
        if r.condition and r.state == "finished" and value is not None:
            finished[r.condition].append(value)
    return metric, matrix, {c: CellStats.of(values) for c, values in finished.items()}


def _last_activity(runs: list[RunSummary], manifest_path: Path) -> float | None:
    """The newest metrics write of a run, else the manifest's mtime."""
    activity = [r.last_update for r in runs if r.last_update is not None]
    if not activity:
        try:
            activity = [manifest_path.stat().st_mtime]
        except OSError:
            activity = []
    return max(activity) if activity else None


def scan_campaign(path: Path, scope: Scope, *, now: float) -> CampaignSummary:
    manifest_path = path / layout.CAMPAIGN_MANIFEST
    manifest = scope.json(manifest_path)
    max_steps = _int(manifest.get("max_steps"))
    runs = _campaign_runs(path, scope, _manifest_entries(path, manifest), now=now, max_steps=max_steps)
    conditions, seeds = _axes(manifest, runs)
    metric, matrix, stats = _matrix(runs, conditions, seeds)
    runner_pid = _int(manifest.get("runner_pid"))
    runner_alive = pid_alive(runner_pid) if runner_pid else None
    counts = {s: sum(r.state == s for r in runs) for s in STATES}
    return CampaignSummary(
        run=scope.run_id(path),
        path=str(path),
        status=campaign_status(runs, runner_alive),
        conditions=conditions,
        seeds=seeds,
        max_steps=max_steps,
        num_runs=_int(manifest.get("num_runs")) or len(runs),
        completed=counts["finished"],
        failed=counts["failed"],
        counts=counts,
        runs=runs,
        matrix=matrix,
        matrix_metric=metric,
        matrix_stats=stats,
        campaign_toml=_str(manifest.get("campaign_toml")),
        timestamp=_str(manifest.get("timestamp")),
        runner_pid=runner_pid,
        runner_alive=runner_alive,
        last_activity=_last_activity(runs, manifest_path),
        error=None if manifest else "manifest.json is missing or unreadable",
    )


def find_runs(root: Path, skip: set[str]) -> list[Path]:
    """Folders below `root` holding a metrics.jsonl, not descending into a run (its folders
    are checkpoints and logs), a campaign in `skip`, hidden folders or W&B folders."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        if layout.METRICS in files:
            found.append(Path(folder))
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS
                         and os.path.join(folder, d) not in skip)
    return found


def campaign_dirs(root: Path) -> list[Path]:
    if (root / layout.CAMPAIGN_MANIFEST).is_file():
        return [root]
    try:
        children = [p for p in root.iterdir() if p.is_dir() and (p / layout.CAMPAIGN_MANIFEST).is_file()]
    except OSError:
        return []
    return sorted(children, key=lambda p: p.name)


def scan_all(root: Path, *, now: float | None = None, confined: bool = False) -> StatusReport:
    """Campaigns (newest first) and standalone runs (by path) under `root`."""
    now = time.time() if now is None else now
    scope = Scope(root, confined)
    campaigns = [scan_campaign(p, scope, now=now) for p in campaign_dirs(root)]
    campaigns.sort(key=lambda c: (c.timestamp or "", c.last_activity or 0.0), reverse=True)
    claimed = {os.path.realpath(r.path) for c in campaigns for r in c.runs}
    skip = {c.path for c in campaigns}
    runs = [scan_run(p, scope, now=now) for p in find_runs(root, skip)
            if os.path.realpath(p) not in claimed and str(p) not in skip]
    return StatusReport(root=str(root), generated_at=now, runs=runs, campaigns=campaigns)


def visible(report: StatusReport, *, show_all: bool, now: float | None = None) -> StatusReport:
    """The default view: ended or dead campaigns idle for a day are hidden (standalone runs
    always show)."""
    if show_all:
        return report
    now = report.generated_at if now is None else now
    keep = [c for c in report.campaigns
            if c.status == "running" or c.last_activity is None
            or now - c.last_activity <= HIDE_IDLE_AFTER_S]
    return msgspec.structs.replace(report, campaigns=keep)
