"""Start the test OpenEnv game (fixtures/openenv_games/guess_server.py) on 127.0.0.1 with
uvicorn, on a free port, and stop it by its process id."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

GAME = Path(__file__).parent / "fixtures" / "openenv_games" / "guess_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes] | None = None, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the game server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"{url} did not become healthy")


@contextlib.contextmanager
def game_server(*, supervise: bool = False, **env: str) -> Iterator[str]:
    """The game's URL while it runs. `supervise`: restart it on the same port whenever it
    exits (a server that dies and comes back)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    environ = {**os.environ, **env}
    cmd = [sys.executable, str(GAME), str(port)]
    if supervise:
        loop = f"while true; do {' '.join(cmd)}; sleep 0.2; done"
        proc = subprocess.Popen(["bash", "-c", loop], env=environ, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        proc = subprocess.Popen(cmd, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(url, None if supervise else proc)
        yield url
    finally:
        if supervise:
            os.killpg(proc.pid, 15)
        else:
            proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
