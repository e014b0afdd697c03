"""Which process a run belongs to, and whether it still lives.

A pid comes from `run.pid` (written by the trainer or the campaign launcher) or, as the
reference did, from a `(pid=N)` mark in the first 4 KiB of the run's stderr/stdout log. A
pid alone can be reused by an unrelated process (a container restart recycles small pids),
so on Linux a live pid whose process started after the pid file was written counts as dead.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from pathlib import Path

from retrain.io import layout

_PID_MARK = re.compile(rb"\(pid=(\d+)\)")
_LOG_FILES = (layout.STDERR, layout.STDOUT)
#: Seconds of clock slack between a process start and its pid file (boot time is whole seconds).
_START_SLACK_S = 2.0


def read_pid(run_dir: Path, allows: Callable[[Path], bool] = lambda p: True) -> tuple[int | None, float | None]:
    """(pid, mtime of the file it came from), or (None, None). Files `allows` rejects are skipped."""
    try:
        if allows(run_dir / layout.PID):
            with open(run_dir / layout.PID, "rb") as f:
                data = f.read(64)
                mtime = os.fstat(f.fileno()).st_mtime
            match = re.search(rb"\d+", data)
            if match:
                return int(match.group()), mtime
    except OSError:
        pass
    for name in _LOG_FILES:
        if not allows(run_dir / name):
            continue
        try:
            with open(run_dir / name, "rb") as f:
                head = f.read(4096)
                mtime = os.fstat(f.fileno()).st_mtime
        except OSError:
            continue
        match = _PID_MARK.search(head)
        if match:
            return int(match.group(1)), mtime
    return None, None


def pid_alive(pid: int, written_at: float | None = None) -> bool:
    """Signal-0 probe; a process that exists but belongs to another user counts as alive."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError:
        return False
    if written_at is not None:
        started = process_start_time(pid)
        if started is not None and started > written_at + _START_SLACK_S:
            return False
    return True


def process_start_time(pid: int) -> float | None:
    """Unix time the process started (Linux /proc), or None where that is unknown."""
    boot = _boot_time()
    if boot is None:
        return None
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # Field 22 (starttime, clock ticks since boot); fields are counted after the ")" that
    # closes the command name, which may itself hold spaces and parentheses.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        ticks = int(fields[19])
    except (IndexError, ValueError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


@functools.lru_cache(maxsize=1)
def _boot_time() -> float | None:
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
