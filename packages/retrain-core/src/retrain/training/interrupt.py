"""A stop asked of a training run: Ctrl-C (SIGINT), or SIGTERM or SIGHUP, the signals a
scheduler, a container runtime or a closed terminal send (Slurm, Kubernetes, Docker, systemd,
preemptible clouds). The first delivery lets the current step finish, saves a checkpoint,
records the run as `interrupted` and prints the command that resumes it; the process exits
with 128 + the signal's number (130, 143, 129).

A second Ctrl-C in a single-process run stops at once (KeyboardInterrupt, as Python's
default). A repeated SIGTERM or SIGHUP is the same request again: supervisors deliver it by
several paths (to the process group and to the process, torchrun and srun forward it), so a
repeat is not a person's second word; the hard stop is the sender's SIGKILL after its grace
period. In a torchrun world every repeat is the same request, Ctrl-C's included, for the
same reason.

The handler lives in the main thread (signals reach only it). In a torchrun world every rank
installs it and the ranks stop after the same step: rank 0's request, handed to every rank
by a collective after each step (`agreed`), decides. Reward worker processes ignore all three
signals (`retrain.rewards.worker`), so the step that finishes is scored like any other.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from retrain.errors import RunStopped

#: the signals a run stops at, saved
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stopped_exit_code(signum: int) -> int:
    """The shell's status of a process a signal stopped: 128 + its number."""
    return 128 + signum


class RunInterrupted(RunStopped):
    """The run stopped at a user's or a scheduler's signal after saving a checkpoint."""

    exit_code = stopped_exit_code(signal.SIGINT)

    def __init__(self, message: str = "", *, hint: str = "", signum: int = signal.SIGINT) -> None:
        super().__init__(message, hint=hint)
        self.signum = signum
        self.exit_code = stopped_exit_code(signum)


class StopRequest:
    """Whether a stop was asked, and by which signal (the first one delivered)."""

    def __init__(self, report: Callable[[str], None], *, distributed: bool = False) -> None:
        self.report = report
        self.distributed = distributed
        self.requested = False
        self.signum: int = signal.SIGINT

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    def ask(self, signum: int) -> None:
        """What a delivery of `signum` does; the handler, callable from a test."""
        if not self.requested:
            self.requested, self.signum = True, signum
            again = " (Ctrl-C again to stop now)" if signum == signal.SIGINT and not self.distributed else ""
            self.report(f"{self._said(signum)}: finishing this step, then saving a checkpoint{again}")
            return
        if signum == signal.SIGINT and self.signum == signal.SIGINT and not self.distributed:
            raise KeyboardInterrupt
        self.report(f"{self._said(signum)} again: already stopping after this step")

    @staticmethod
    def _said(signum: int) -> str:
        return "interrupt" if signum == signal.SIGINT else signal.Signals(signum).name

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """The handler for the block (outside the main thread, where Python allows none, the
        request stays unasked and the signals keep their handlers)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}

        def handler(signum: int, frame: FrameType | None) -> None:
            self.ask(signum)

        for s in STOP_SIGNALS:
            signal.signal(s, handler)
        try:
            yield self
        finally:
            for s, before in previous.items():
                signal.signal(s, before)

    def agreed(self, share: Callable[[Any], Any] | None) -> bool:
        """Whether the run stops now. `share` is the backend's collective that hands rank 0's
        value to every rank (None in a single process): every rank must call this at the same
        point of the loop, and every rank then stops after the same step. A rank that took the
        signal alone goes on until rank 0 takes it (torchrun and srun deliver it to all)."""
        if share is None:
            return self.requested
        requested, signum = share((self.requested, self.signum))
        if requested and not self.requested:
            self.requested, self.signum = True, signum
        return bool(requested)

    def interrupted(self, what: str, saved: str, hint: str) -> RunInterrupted:
        """The exception that ends the run after `what` (e.g. "step 3"), saved at `saved`."""
        by = "interrupted" if self.signum == signal.SIGINT else f"stopped by {self.name}"
        where = f" after {what}" if what else ""
        return RunInterrupted(f"{by}{where}; {saved}", hint=hint, signum=self.signum)


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
