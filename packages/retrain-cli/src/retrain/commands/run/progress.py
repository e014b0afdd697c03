"""What `retrain CONFIG` shows while it trains, on standard output.

On a terminal: a live progress bar (step/total, reward, loss, tokens/s, ETA) pinned under the
same step lines the plain log prints every `every` steps, so the scrollback keeps the history.
Anywhere else (a pipe, a file, a campaign's stdout.log): the plain lines only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO, cast

from rich.console import Console
from rich.file_proxy import FileProxy
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

from retrain.training.console import PlainReporter, Reporter, reward_failures

EVERY = 10


class RichReporter:
    """The plain lines, printed above a live bar per phase. A bar is added when its phase
    begins, at the step it begins from, so a resumed run's ETA counts only the steps this
    process ran."""

    def __init__(self, console: Console, every: int = EVERY) -> None:
        self.lines = PlainReporter(cast(TextIO, FileProxy(console, console.file)), every)
        self.progress = Progress(
            TextColumn("[bold]{task.description:>6}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}", markup=False), TextColumn("eta"), TimeRemainingColumn(),
            console=console, refresh_per_second=4)
        self._tasks: dict[str, TaskID] = {}

    def _advance(self, phase: str, step: int, total: int, stats: str) -> None:
        if phase not in self._tasks:
            self._tasks[phase] = self.progress.add_task(phase, total=total, completed=step, stats=stats)
        self.progress.update(self._tasks[phase], completed=step + 1, stats=stats)

    def start(self, info: Mapping[str, Any]) -> None:
        self.lines.start(info)
        self.progress.start()

    def warmup(self, step: int, total: int, row: Mapping[str, Any]) -> None:
        self._advance("warmup", step, total, f"loss {row.get('loss', 0.0):.4f}")
        self.lines.warmup(step, total, row)

    def step(self, step: int, total: int, row: Mapping[str, Any]) -> None:
        stats = (f"reward {row.get('mean_reward', 0.0):.3f}  loss {row.get('loss', 0.0):+.4f}  "
                 f"{row.get('tokens_per_second', 0.0):,.0f} tok/s{reward_failures(row)}")
        self._advance("RL", step, total, stats)
        self.lines.step(step, total, row)

    def sft(self, step: int, total: int, row: Mapping[str, Any]) -> None:
        stats = f"loss {row.get('loss', 0.0):.4f}  {row.get('tokens_per_second', 0.0):,.0f} tok/s"
        self._advance("SFT", step, total, stats)
        self.lines.sft(step, total, row)

    def message(self, text: str) -> None:
        self.lines.message(text)

    def finish(self, summary: Mapping[str, Any]) -> None:
        self.progress.stop()
        self.lines.finish(summary)


@contextmanager
def open_reporter(stream: TextIO | None = None) -> Iterator[Reporter]:
    """The reporter for `stream` (standard output by default). A live bar is stopped on the
    way out whatever happened, so an error line never lands inside it."""
    stream = stream or sys.stdout
    console = Console(file=stream)
    if not console.is_terminal or console.is_dumb_terminal:
        yield PlainReporter(stream, every=EVERY)
        return
    reporter = RichReporter(console)
    try:
        yield reporter
    finally:
        reporter.progress.stop()
