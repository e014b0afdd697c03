"""Ctrl-C while a run trains: the first interrupt lets the current step finish, saves a
checkpoint, records the run as `interrupted` and prints the command that resumes it; a second
interrupt stops at once (KeyboardInterrupt, as Python's default).

Only the main thread of a single-process run installs the handler: signals reach only the
main thread, and the processes of a torchrun world would each stop after a different step.
Reward worker processes ignore SIGINT (`retrain.rewards.worker`), so the step that finishes
is scored like any other.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

from retrain.errors import RunStopped


class RunInterrupted(RunStopped):
    """The run stopped at a user's interrupt after saving a checkpoint."""

    exit_code = 130


class StopRequest:
    def __init__(self, report: Callable[[str], None]) -> None:
        self.report = report
        self.requested = False

    @contextlib.contextmanager
    def installed(self, enabled: bool = True) -> Iterator[StopRequest]:
        if not enabled or threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.getsignal(signal.SIGINT)

        def handler(signum: int, frame: FrameType | None) -> None:
            if self.requested:
                raise KeyboardInterrupt
            self.requested = True
            self.report("interrupt: finishing this step, then saving a checkpoint (Ctrl-C again to stop now)")

        signal.signal(signal.SIGINT, handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


def resume_command(log_dir: str, argv: list[str] | None = None) -> str:
    """The command line that resumes this run: this process's own arguments (so overrides are
    kept), with `--resume LOG_DIR` in place of any earlier one."""
    args = list(sys.argv[1:] if argv is None else argv)
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("--resume", "--resume-from", "--resume_from"):
            skip = True
            continue
        if arg.startswith(("--resume=", "--resume-from=", "--resume_from=")):
            continue
        kept.append(arg)
    if kept and kept[0] == "run":
        kept = kept[1:]
    return shlex.join(["retrain", *kept, "--resume", log_dir])
