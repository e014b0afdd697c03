"""`vllm serve` (the CPU build of scripts/peer/vllm_env.py) on 127.0.0.1, started in a process
group of its own and stopped with everything it started: what the slow tier's vLLM fixture
(tests/vllm_server.py) and the learning benchmark (scripts/bench/async_learning.py) run.

The server loads LoRA adapters at run time (`--enable-lora`, `--max-loras`, runtime updating
on), requires an API key, computes in fp32 and returns the logprobs of the distribution it
samples from (`--logprobs-mode processed_logprobs`). On 2 busy cores it takes minutes to start:
`start` waits up to `START_TIMEOUT_S` for GET /v1/models to answer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 1200.0
#: room for max_async_level up to MAX_LORAS - 2 (the versions in flight and the latest adapter)
MAX_LORAS = 6
MAX_LORA_RANK = 16


@dataclass
class VllmServer:
    proc: subprocess.Popen[bytes]
    url: str  # http://127.0.0.1:PORT
    model: Path  # the folder it serves (its model name)
    log: Path
    api_key: str

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
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)


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


def start(python: Path, root: Path, model: Path, *, api_key: str, port: int = 0,
          max_loras: int = MAX_LORAS, classifier: bool = False, lora: bool = True,
          extra: Sequence[str] = ()) -> VllmServer:
    """`vllm serve MODEL` from the environment of `python`, answering once GET /v1/models
    does; its output goes to `root/vllm.log`. Stopped again if it does not start. `classifier`:
    MODEL is a sequence classifier served for `/classify` (vLLM's pooling runner), without
    LoRA or sampling settings. `lora=False`: no runtime LoRA (vLLM 0.32's CPU build fails a
    `prompt_logprobs` request when LoRA is enabled). `extra`: more arguments of `vllm serve`
    (`--lora-modules NAME=FOLDER`)."""
    root.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = root / "vllm.log"
    cmd = [str(python.parent / "vllm"), "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
           "--api-key", api_key, "--dtype", "float32", "--max-model-len", "512"]
    if classifier:
        cmd += ["--runner", "pooling"]
    else:
        cmd += ["--logprobs-mode", "processed_logprobs"]
        if lora:
            cmd += ["--enable-lora", "--max-loras", str(max_loras), "--max-lora-rank", str(MAX_LORA_RANK)]
    cmd += list(extra)
    threads = max(1, min(2, os.cpu_count() or 1))
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=server_environ(threads), cwd=root,
                                start_new_session=True)
    served = VllmServer(proc, f"http://127.0.0.1:{port}", model, log, api_key)
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
            raise RuntimeError(f"vllm serve exited with {served.proc.returncode}:\n"
                               f"{served.log.read_text(errors='replace')[-4000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(served.url + "/v1/models", headers=served.headers, timeout=10).status_code == 200:
                return
        time.sleep(2)
    raise RuntimeError(f"vllm serve did not answer within {START_TIMEOUT_S:.0f} s:\n"
                       f"{served.log.read_text(errors='replace')[-4000:]}")
