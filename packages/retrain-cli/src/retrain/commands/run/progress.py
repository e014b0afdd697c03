"""Live console for a training run: a rich progress bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from retrain.training.console import PlainReporter, summary_lines


class RichReporter:
    """Progress bar with step, reward, loss, tokens/s and ETA; warmup gets its own bar."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"), TimeRemainingColumn(), console=self.console, transient=False)
        self._rl: Any = None
        self._warm: Any = None

    def start(self, info: Mapping[str, Any]) -> None:
        self.console.print("retrain: " + ", ".join(f"{k}={v}" for k, v in info.items()))
        self.progress.start()
        if info.get("warmup"):
            self._warm = self.progress.add_task("warmup", total=int(info["warmup"]), stats="")
        self._rl = self.progress.add_task("RL", total=int(info["steps"]), stats="")

    def warmup(self, step: int, total: int, row: Mapping[str, Any]) -> None:
        if self._warm is not None:
            self.progress.update(self._warm, completed=step + 1, stats=f"loss {row.get('loss', 0.0):.3f}")

    def step(self, step: int, total: int, row: Mapping[str, Any]) -> None:
        stats = (f"reward {row.get('mean_reward', 0.0):.3f}  loss {row.get('loss', 0.0):+.4f}  "
                 f"{row.get('tokens_per_second', 0.0):,.0f} tok/s")
        self.progress.update(self._rl, completed=step + 1, stats=stats)

    def message(self, text: str) -> None:
        self.console.print(text)

    def finish(self, summary: Mapping[str, Any]) -> None:
        self.progress.stop()
        for line in summary_lines(summary):
            self.console.print(line)


def make_reporter() -> Any:
    if sys.stderr.isatty():
        return RichReporter()
    return PlainReporter(sys.stderr, every=10)
