"""Helpers shared by the inference-server tests: start `retrain serve` on 127.0.0.1 in a
subprocess, read its port, stop it by its pid; or serve it in this process (`serve_in_process`)."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SERVER_CONFIG = """
[model]
model = "tiny"
lora_rank = 4
[backend]
devices = "cpu"
adapter_path = "{root}/adapters"
[training]
seed = 0
"""


@dataclass
class Served:
    proc: subprocess.Popen[str]
    url: str  # http://127.0.0.1:PORT
    root: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def counters(self) -> dict[str, float]:
        import httpx

        text = httpx.get(self.url + "/metrics", headers=self.headers, timeout=10).text
        return {k: float(v) for k, v in re.findall(r"^retrain_serve_(\w+) ([0-9.e+-]+)$", text, re.M)}

    headers: dict[str, str] | None = None


def start_server(root: Path, *args: str, api_key: str = "") -> Served:
    root.mkdir(parents=True, exist_ok=True)
    (root / "adapters").mkdir(exist_ok=True)
    cfg = root / "serve.toml"
    cfg.write_text(SERVER_CONFIG.format(root=root))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "retrain.cli", "serve", str(cfg), "--port", "0", *args]
    if api_key:
        cmd += ["--api-key", api_key]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=root)
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "retrain serve:" in line or proc.poll() is not None:
            break
    match = re.search(r"http://(127\.0\.0\.1:\d+)/v1", line)
    if not match:
        proc.kill()
        raise AssertionError(f"retrain serve did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    served = Served(proc, f"http://{match.group(1)}", root)
    served.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return served


@contextlib.contextmanager
def serve_in_process(root: Path, config: str, *, api_key: str = "") -> Iterator[str]:
    """`retrain serve` of the TOML `config` on 127.0.0.1 in this process (its serving engine
    and HTTP app under uvicorn, as the command runs them, without a new interpreter's
    imports); the base URL, `.../v1`."""
    import uvicorn

    from retrain.inference_engine.pytorch.serving import create
    from retrain.serve.app import create_app
    from retrain.validation.load import load_config

    cfg = root / "serve.toml"
    cfg.write_text(config)
    engine = create(load_config(cfg, [], import_plugins=False).config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(create_app(engine, api_key=api_key), log_level="warning", access_log=False,
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert server.started, "retrain serve did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        engine.close()
        sock.close()
