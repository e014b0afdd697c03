"""What a campaign shows while it runs: on a terminal a live table (runs done / running /
failed, each run's step and current reward), elsewhere one line per run start and end."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Protocol, TextIO


class CampaignView(Protocol):
    def begin(self, names: list[str], done: list[str]) -> None: ...

    def started(self, name: str, attempt: int) -> None: ...

    def step(self, name: str, step: int, total: int, reward: float | None) -> None: ...

    def ended(self, name: str, status: str, error: str = "") -> None: ...

    def message(self, text: str) -> None: ...

    def close(self) -> None: ...


@dataclass
class RunLine:
    status: str = "pending"
    step: int | None = None
    total: int | None = None
    reward: float | None = None
    started: float | None = None
    elapsed: float | None = None
    error: str = ""


class _Board:
    """The runs' states both views print from."""

    def __init__(self) -> None:
        self.runs: dict[str, RunLine] = {}

    def begin(self, names: list[str], done: list[str]) -> None:
        self.runs = {n: RunLine(status="finished" if n in done else "pending") for n in names}

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.runs.values())

    def headline(self) -> str:
        total = len(self.runs)
        return (f"campaign: {self.count('finished')}/{total} done, {self.count('running')} running, "
                f"{self.count('failed')} failed, {self.count('pending')} pending")


class PlainView(_Board):
    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__()
        self.stream = stream or sys.stderr

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def begin(self, names: list[str], done: list[str]) -> None:
        super().begin(names, done)
        if done:
            self._print(f"{len(done)} of {len(names)} runs already finished; running the other {len(names) - len(done)}")

    def started(self, name: str, attempt: int) -> None:
        line = self.runs[name]
        line.status, line.started = "running", time.monotonic()
        index = list(self.runs).index(name) + 1
        again = f" (attempt {attempt})" if attempt > 1 else ""
        self._print(f"[{index}/{len(self.runs)}] {name} started{again}")

    def step(self, name: str, step: int, total: int, reward: float | None) -> None:
        line = self.runs[name]
        line.step, line.total, line.reward = step, total, reward

    def ended(self, name: str, status: str, error: str = "") -> None:
        line = self.runs[name]
        line.status, line.error = status, error
        if line.started is not None:
            line.elapsed = time.monotonic() - line.started
        took = f" in {line.elapsed:.1f}s" if line.elapsed is not None else ""
        reward = f", reward {line.reward:.3f}" if line.reward is not None else ""
        detail = f": {error}" if error else ""
        self._print(f"{name} {status}{took}{reward}{detail}")

    def message(self, text: str) -> None:
        self._print(text)

    def close(self) -> None:
        self._print(self.headline())


class LiveView(PlainView):
    """A rich Live table on stderr, redrawn as runs start, step and end."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live

        super().__init__(sys.stderr)
        self.console = Console(stderr=True)
        self.live = Live(console=self.console, refresh_per_second=4, transient=False)

    def _print(self, text: str) -> None:
        self.live.console.print(text)

    def _table(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(expand=False)
        for column in ("run", "state", "step", "reward", "time"):
            table.add_column(column, justify="right" if column in ("step", "reward", "time") else "left")
        for name, line in self.runs.items():
            step = f"{line.step + 1}/{line.total}" if line.step is not None and line.total else "-"
            reward = f"{line.reward:.3f}" if line.reward is not None else "-"
            seconds = line.elapsed if line.elapsed is not None else (
                time.monotonic() - line.started if line.started is not None and line.status == "running" else None)
            table.add_row(name, line.status, step, reward, f"{seconds:.0f}s" if seconds is not None else "-")
        return Group(Text(self.headline()), table)

    def begin(self, names: list[str], done: list[str]) -> None:
        super().begin(names, done)
        self.live.start()
        self.live.update(self._table())

    def started(self, name: str, attempt: int) -> None:
        line = self.runs[name]
        line.status, line.started = "running", time.monotonic()
        if attempt > 1:
            self._print(f"{name}: attempt {attempt}, resuming from its last checkpoint")
        self.live.update(self._table())

    def step(self, name: str, step: int, total: int, reward: float | None) -> None:
        super().step(name, step, total, reward)
        self.live.update(self._table())

    def ended(self, name: str, status: str, error: str = "") -> None:
        line = self.runs[name]
        line.status, line.error = status, error
        if line.started is not None:
            line.elapsed = time.monotonic() - line.started
        if error:
            self._print(f"{name} {status}: {error}")
        self.live.update(self._table())

    def close(self) -> None:
        self.live.update(self._table())
        self.live.stop()


def make_view(stream: TextIO | None = None) -> CampaignView:
    stream = stream or sys.stderr
    return LiveView() if stream.isatty() else PlainView(stream)
