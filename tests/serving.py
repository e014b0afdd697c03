"""Helpers shared by the inference-server tests: start `retrain serve` on 127.0.0.1 in a
subprocess, read its port, stop it by its pid."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
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
