"""A Python environment with TRL, made once and cached, for comparing retrain with TRL.

TRL never enters retrain's dependencies: `ensure()` makes a separate virtual environment with
uv, holding TRL at `TRL_VERSION` and the very torch, transformers and peft versions installed
in the calling environment, so both sides of a comparison run the same kernels. It lives under
`$RETRAIN_PEER_CACHE` (default `~/.cache/retrain/peer`) in a folder named by those versions,
and is marked ready only after a complete install; concurrent callers wait on a file lock.
`RETRAIN_PEER_PYTHON` names an existing interpreter to use instead.

    python scripts/peer/trl_env.py      # prints the interpreter's path, or exits 1 with the reason
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

TRL_VERSION = "1.16.0"
MATCHED = ("torch", "transformers", "peft")
INSTALL_TIMEOUT_S = 1200


class PeerUnavailable(RuntimeError):
    """TRL's environment cannot be made here (no uv, no package index, a failed install)."""


def pins() -> dict[str, str]:
    """Package -> version for the TRL environment; local labels (`+cu130`) are dropped."""
    out = {"trl": TRL_VERSION}
    for name in MATCHED:
        try:
            out[name] = re.sub(r"\+.*$", "", version(name))
        except PackageNotFoundError as exc:
            raise PeerUnavailable(f"{name} is not installed in this environment") from exc
    return out


def location(wanted: dict[str, str]) -> Path:
    root = Path(os.environ.get("RETRAIN_PEER_CACHE") or Path.home() / ".cache" / "retrain" / "peer")
    py = f"py{sys.version_info.major}.{sys.version_info.minor}"
    return root / "-".join([py, *(f"{k}{v}" for k, v in sorted(wanted.items()))])


def _run(cmd: list[str]) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise PeerUnavailable(f"{' '.join(cmd[:3])} … timed out after {INSTALL_TIMEOUT_S}s") from exc
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or done.stdout).strip().splitlines() if ln.strip()]
        raise PeerUnavailable(f"{' '.join(cmd[:3])} … failed: {lines[-1] if lines else done.returncode}")


def ensure() -> Path:
    """The TRL environment's python, made now if it is not cached yet."""
    given = os.environ.get("RETRAIN_PEER_PYTHON")
    if given:
        if not Path(given).exists():
            raise PeerUnavailable(f"RETRAIN_PEER_PYTHON={given} does not exist")
        return Path(given)
    wanted = pins()
    home = location(wanted)
    python = home / "bin" / "python"
    marker = home / "ready.json"
    if marker.exists():
        return python
    uv = shutil.which("uv")
    if uv is None:
        raise PeerUnavailable("uv is not on PATH (it makes the TRL environment)")
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return python
        shutil.rmtree(home, ignore_errors=True)
        _run([uv, "venv", "--quiet", "--python", f"{sys.version_info.major}.{sys.version_info.minor}", str(home)])
        _run([uv, "pip", "install", "--quiet", "--python", str(python),
              *(f"{k}=={v}" for k, v in sorted(wanted.items()))])
        marker.write_text(json.dumps(wanted))
    return python


def main() -> None:
    try:
        print(ensure())
    except PeerUnavailable as exc:
        print(f"TRL environment unavailable: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
