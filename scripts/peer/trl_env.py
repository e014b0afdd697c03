"""A Python environment with TRL, made once and cached, for comparing retrain with TRL.

TRL never enters retrain's dependencies: `ensure()` makes a separate virtual environment with
uv, holding TRL at `TRL_VERSION` and the very torch, transformers and peft versions installed
in the calling environment, so both sides of a comparison run the same kernels. It lives under
`$RETRAIN_PEER_CACHE` (default `~/.cache/retrain/peer`) in a folder named by those versions,
and is marked ready only after a complete install; concurrent callers wait on a file lock.
`RETRAIN_PEER_PYTHON` names an existing interpreter to use instead (scripts/peer/cached_env.py).

    python scripts/peer/trl_env.py      # prints the interpreter's path, or exits 1 with the reason
"""

from __future__ import annotations

import os
import re
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from cached_env import PeerUnavailable, cache_root, made_once, run

TRL_VERSION = "1.16.0"
MATCHED = ("torch", "transformers", "peft")
INSTALL_TIMEOUT_S = 1200


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
    py = f"py{sys.version_info.major}.{sys.version_info.minor}"
    return cache_root() / "-".join([py, *(f"{k}{v}" for k, v in sorted(wanted.items()))])


def ensure() -> Path:
    """The TRL environment's python, made now if it is not cached yet."""
    given = os.environ.get("RETRAIN_PEER_PYTHON")
    if given:
        if not Path(given).exists():
            raise PeerUnavailable(f"RETRAIN_PEER_PYTHON={given} does not exist")
        return Path(given)
    wanted = pins()

    def build(uv: str, python: Path) -> None:
        run([uv, "venv", "--quiet", "--python", f"{sys.version_info.major}.{sys.version_info.minor}",
             str(python.parent.parent)], INSTALL_TIMEOUT_S)
        run([uv, "pip", "install", "--quiet", "--python", str(python),
             *(f"{k}=={v}" for k, v in sorted(wanted.items()))], INSTALL_TIMEOUT_S)

    return made_once(location(wanted), "TRL", build, wanted)


def main() -> None:
    try:
        print(ensure())
    except PeerUnavailable as exc:
        print(f"TRL environment unavailable: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
