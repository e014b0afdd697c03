"""Crash-safe file writes: temp file in the same folder, fsync, rename, fsync the folder.

A reader sees either the old file or the new one, never a torn one, even after SIGKILL or a
power cut (the rename is atomic on POSIX file systems; the folder fsync makes it durable).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)


def write_text_atomic(path: str | Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | Path, obj: Any, *, indent: int | None = 2) -> None:
    write_text_atomic(path, json.dumps(obj, indent=indent, sort_keys=True, default=str) + "\n")


def fsync_dir(folder: str | Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    for folder in sorted({p.parent for p in root.rglob("*")} | {root}):
        fsync_dir(folder)


def write_dir_atomic(path: str | Path, fill: Callable[[Path], None]) -> Path:
    """Build a directory with `fill(tmp)` under a temporary name, fsync it, rename it into
    place (replacing any directory of that name) and fsync the parent. A fill that fails (a
    full disk) removes what it wrote, so the space it took is free again."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        fill(tmp)
        fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)
    fsync_dir(target.parent)
    return target
