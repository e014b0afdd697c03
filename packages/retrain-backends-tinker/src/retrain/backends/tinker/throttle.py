"""A counting semaphore shared by every process that names the same folder.

`[backend] throttle_dir` holds `max_concurrent` lock files; a remote call runs while holding an
exclusive `flock` on one of them, so at most `max_concurrent` calls are in flight across all
the runs of a campaign. A crashed process releases its lock with its file descriptors, so no
slot can leak. Without a folder there is no limit.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path


class Throttle:
    def __init__(self, folder: str, slots: int, *, poll_s: float = 0.05) -> None:
        self.folder = Path(folder) if folder else None
        self.slots, self.poll_s = slots, poll_s
        self.waited_s = 0.0
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            for i in range(slots):
                (self.folder / f"slot_{i}.lock").touch(exist_ok=True)

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        if self.folder is None:
            yield
            return
        t0 = time.perf_counter()
        fd = self._acquire()
        self.waited_s += time.perf_counter() - t0
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _acquire(self) -> int:
        assert self.folder is not None
        while True:
            for i in range(self.slots):
                fd = os.open(self.folder / f"slot_{i}.lock", os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fd
                except BlockingIOError:
                    os.close(fd)
            time.sleep(self.poll_s)
