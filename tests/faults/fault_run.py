"""Helpers of the fault-injection suite (docs/reliability.md lists every case and the test that
keeps it): a tiny run in a test's own folder, a reward that sends its own process a signal at a
chosen call (a stop that lands mid-step, at a known step), and a `retrain` process a test can
signal from outside and wait on."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tiny_run import ENV, write_tiny_run

#: a graded toy reward that sends this process `SIGNAL_NAME` on the calls in `SIGNAL_AT_CALLS`
#: (8 completions a step with the suite's sizes: call 13 falls in step 1), and with
#: `SIGNAL_AGAIN_AFTER_S` once more that long after (two signals sent at once reach Python's
#: handler once)
SIGNALLING = '''
import os, signal, time

calls = [0]

def score(response, reference):
    calls[0] += 1
    if str(calls[0]) in os.environ.get("SIGNAL_AT_CALLS", "").split(","):
        os.kill(os.getpid(), getattr(signal, os.environ["SIGNAL_NAME"]))
        if os.environ.get("SIGNAL_AGAIN_AFTER_S"):
            time.sleep(float(os.environ["SIGNAL_AGAIN_AFTER_S"]))
            os.kill(os.getpid(), getattr(signal, os.environ["SIGNAL_NAME"]))
    return min(1.0, sum(ch.isdigit() for ch in response) / 4)
'''


def signalling_run(root: Path, name: str = "run", **training: object) -> Path:
    """`<root>/<name>.toml`: the tiny run (4 steps of 2 prompts x 4 completions, a checkpoint
    after every step unless `training` says otherwise) scored by SIGNALLING."""
    (root / "signalling.py").write_text(SIGNALLING)
    cfg = write_tiny_run(root, name, training={"max_steps": 4, "save_every": 1, **training})
    cfg.write_text(cfg.read_text().replace('custom_module = "toy_reward"', 'custom_module = "signalling"'))
    sys.modules.pop("signalling", None)
    importlib.invalidate_caches()
    return cfg


def meta(log_dir: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((log_dir / "run_meta.json").read_text())
    return result


class Spawned:
    """`retrain ARGS CFG` in a process of its own, in a session of its own (a signal the test
    sends reaches it alone), its output in files beside the config."""

    def __init__(self, cfg: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.out, self.err = cfg.parent / f"{cfg.stem}.stdout", cfg.parent / f"{cfg.stem}.stderr"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "retrain.cli", str(cfg), *args], cwd=cfg.parent,
                                         env={**os.environ, **ENV, **(env or {})}, stdout=out, stderr=err,
                                         start_new_session=True)

    def wait_for(self, ready: Callable[[], bool], timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            assert self.proc.poll() is None, f"the run ended first: {self.stderr()[-3000:]}"
            assert time.monotonic() < deadline, "timed out waiting"
            time.sleep(0.05)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 600) -> int:
        return self.proc.wait(timeout=timeout)

    def stderr(self) -> str:
        return self.err.read_text()

    def stdout(self) -> str:
        return self.out.read_text()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def rows(log_dir: Path) -> int:
    """How many metrics rows the run has written (a torn last line not counted)."""
    try:
        return (log_dir / "metrics.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def cut(run: Spawned, log_dir: Path, after_rows: int, signum: int) -> Spawned:
    """Send `run` `signum` twice (one request, as a supervisor's several paths deliver it) once
    `after_rows` metrics rows are on disk."""
    run.wait_for(lambda: rows(log_dir) >= after_rows)
    run.signal(signum)
    run.signal(signum)
    return run
