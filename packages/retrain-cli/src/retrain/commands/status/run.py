"""`retrain status [LOGDIR] [--json] [--all] [--active] [--watch] [--plot FILE]`."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from retrain.errors import UserError
from retrain.status.format import render
from retrain.status.plot import require_matplotlib, run_curves, write_plot
from retrain.status.report import StatusReport
from retrain.status.scan import scan_all, visible

CLEAR = "\x1b[2J\x1b[H"


def log_root(logdir: str) -> Path:
    root = Path(logdir)
    if not root.is_dir():
        raise UserError(f"No log directory found: {logdir}",
                         hint="pass the folder that holds your runs (default: logs)")
    return root


def snapshot(root: Path, *, show_all: bool, as_json: bool) -> tuple[StatusReport, str]:
    report = scan_all(root)
    shown = visible(report, show_all=show_all)
    if as_json:
        return shown, json.dumps(msgspec.to_builtins(shown), indent=2)
    return shown, render(shown, hidden=len(report.campaigns) - len(shown.campaigns))


def watch(show: Callable[[], str], *, interval: float, clear: bool, cycles: int | None = None,
          sleep: Callable[[float], None] = time.sleep) -> None:
    """Re-render every `interval` seconds until Ctrl-C (which ends with exit status 0)."""
    done = 0
    try:
        while cycles is None or done < cycles:
            text = show()
            sys.stdout.write((CLEAR if clear else "") + text + "\n")
            sys.stdout.flush()
            done += 1
            if cycles is None or done < cycles:
                sleep(interval)
    except KeyboardInterrupt:
        return


def run(logdir: str = "logs", *, as_json: bool = False, show_all: bool = False, active: bool = False,
        watch_: bool = False, plot: str | None = None, interval: float = 5.0) -> None:
    root = log_root(logdir)
    if interval <= 0:
        raise UserError("--interval must be positive")
    if plot:
        require_matplotlib()
    show_all = show_all and not active
    report, text = snapshot(root, show_all=show_all, as_json=as_json)
    written = None
    if plot:
        curves = [run_curves(Path(r.path), r.run) for r in report.all_runs()]
        written = write_plot(curves, Path(plot), f"runs under {root}")
    if not watch_:
        print(text)
        if written is not None:
            print(f"plot: {written}", file=sys.stderr if as_json else sys.stdout)
        return
    if written is not None:  # the screen is cleared at each refresh
        print(f"plot: {written}", file=sys.stderr)
    first = [text]

    def show() -> str:
        return first.pop() if first else snapshot(root, show_all=show_all, as_json=as_json)[1]

    watch(show, interval=interval, clear=not as_json)
