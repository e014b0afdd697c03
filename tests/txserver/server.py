"""Start and stop the Tinker-compatible test server (skyrl-tx + the bridge in api.py).

The server runs from its own virtual environment, built outside the repository by
scripts/ci/install-tinker-server.sh (run here when missing). Where that cannot be built (no
package registry) the tests skip and say so, except under CI, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[1]
INSTALL = REPO / "scripts" / "ci" / "install-tinker-server.sh"
API_KEY = "tml-test-key-3f9c2a61d0b84e57"  # what the tests grep every run file for
# Every sequence sampled, and every datum trained, alone: the engine otherwise batches the
# requests that happen to be pending together, so the shapes its kernels run at (and the
# last bits of their sums) would follow the timing of concurrent submissions. With one
# sequence per batch, and the sequence-length bins fixed in engine.py, a run's floats are a
# function of its inputs alone, and a resumed run can be compared bit for bit.
BACKEND_CONFIG = {"max_lora_adapters": 16, "max_lora_rank": 16, "sample_max_num_sequences": 1,
                  "train_micro_batch_size": 1}


def venv() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "retrain" / "txserver-skyrl-tx-0.3.0"
    return Path(os.environ.get("RETRAIN_TX_VENV", default))


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the Tinker test server must run on CI: {reason}")
    pytest.skip(f"Tinker test server unavailable: {reason}")


def ensure_venv() -> Path:
    python = venv() / "bin" / "python"
    if not python.exists():
        if shutil.which("uv") is None:
            unavailable("uv is not on PATH to build its environment")
        proc = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=1200, check=False)
        if proc.returncode != 0 or not python.exists():
            unavailable(f"{INSTALL.name} failed: {(proc.stderr or proc.stdout)[-600:]}")
    return python


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class TxServer:
    proc: subprocess.Popen[bytes]
    port: int
    model: Path
    root: Path
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM to the API process (it stops its engine), then SIGKILL to the group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def start(root: Path, model: Path, *, port: int = 0, db: Path | None = None, timeout: float = 240.0) -> TxServer:
    """Start on 127.0.0.1 and wait until the engine answers; the state (SQLite DB,
    checkpoints) lives under `root`, so a restart on the same `root` keeps it."""
    python = ensure_venv()
    root.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = root / f"server-{port}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV", "PYTHON"))}
    env.update({"JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "XLA_FLAGS": "--xla_force_host_platform_device_count=1", "TOKENIZERS_PARALLELISM": "false"})
    cmd = [str(python), str(HERE / "api.py"), "--host", "127.0.0.1", "--port", str(port),
           "--base-model", str(model), "--database-url", f"sqlite:///{db or root / 'tinker.db'}",
           "--checkpoints-base", str(root / "checkpoints"),
           "--backend-config", json.dumps(BACKEND_CONFIG)]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = TxServer(proc, port, model, root, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            server.stop()
            raise RuntimeError(f"the test server exited ({proc.returncode}):\n{server.tail()}")
        if _healthy(server.url) and "Starting background engine" in server.tail(100_000):
            return server
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"the test server did not start in {timeout:.0f} s:\n{server.tail()}")


def _healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url + "/api/v1/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
