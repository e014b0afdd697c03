"""A peer environment (a separate virtual environment made with uv, outside retrain's
dependencies) made once and cached: the folder under `$RETRAIN_PEER_CACHE` (default
`~/.cache/retrain/peer`) is named by what it holds, so a change of pins makes a new one, and is
marked ready (`ready.json`) only after a complete install; concurrent callers wait on a file
lock beside it, and a folder left half-made by a killed install is made again.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path


class PeerUnavailable(RuntimeError):
    """A peer environment cannot be made here (no uv, no package index, a failed install)."""


def cache_root() -> Path:
    return Path(os.environ.get("RETRAIN_PEER_CACHE") or Path.home() / ".cache" / "retrain" / "peer")


def run(cmd: list[str], timeout_s: float) -> None:
    """`cmd`, or PeerUnavailable naming it with the last line it printed."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise PeerUnavailable(f"{' '.join(cmd[:3])} … timed out after {timeout_s:g}s") from exc
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or done.stdout).strip().splitlines() if ln.strip()]
        raise PeerUnavailable(f"{' '.join(cmd[:3])} … failed: {lines[-1] if lines else done.returncode}")


def made_once(home: Path, what: str, build: Callable[[str, Path], None], ready: Mapping[str, str]) -> Path:
    """The python of the environment at `home`, made first when it is not ready: `build(uv,
    python)` installs into the empty environment (`what` names it in errors)."""
    python = home / "bin" / "python"
    marker = home / "ready.json"
    if marker.exists():
        return python
    uv = shutil.which("uv")
    if uv is None:
        raise PeerUnavailable(f"uv is not on PATH (it makes the {what} environment)")
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return python
        shutil.rmtree(home, ignore_errors=True)
        build(uv, python)
        marker.write_text(json.dumps(dict(ready)))
    return python
