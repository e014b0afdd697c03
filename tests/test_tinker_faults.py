"""The Tinker backend against the test server behind a fault-injecting proxy (txserver/proxy.py):
429 bursts and slow answers are retried within bounds and the run completes; a service that
dies mid-step stops the run in bounded time with one line naming the call and the service, no
traceback, its last checkpoint intact, and the run resumes from it once the service is back.
No file of either run holds the API key."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from txserver.proxy import FaultProxy
from txserver.runs import assert_no_key, retrain, write_run
from txserver.server import TxServer

from retrain.io.log import read_jsonl
from retrain.training.state import read_state

# every test of the session server (tx_server) runs on one xdist worker, which starts it once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("txserver")]


def test_429_bursts_and_slow_answers_are_retried(tx_server: TxServer, tmp_path: Path) -> None:
    proxy = FaultProxy(tx_server.url).start()
    try:
        proxy.faults.delay_s = 0.3
        for path in ("/forward_backward", "/optim_step", "/asample", "/save_weights_for_sampler"):
            proxy.too_many(path, 3)
        cfg = write_run(tmp_path, tx_server, url=proxy.url, eval_every=0, max_steps=2, save_every=0)
        done = retrain(cfg, timeout=600)
    finally:
        proxy.stop()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert proxy.injected["429"] == 12, proxy.injected
    rows = read_jsonl(tmp_path / "logs" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1] and all(r["tinker/sample_s"] > 0 for r in rows)
    assert_no_key(tmp_path)


def test_a_service_killed_mid_step_stops_the_run_cleanly_and_it_resumes(tx_server: TxServer, tmp_path: Path) -> None:
    proxy = FaultProxy(tx_server.url).start()
    # step 2's forward_backward: after checkpoint_step_2, before the step's update
    proxy.die_at("/forward_backward", 3)
    cfg = write_run(tmp_path, tx_server, url=proxy.url, eval_every=0, max_steps=4, save_every=2,
                    options={"call_timeout_s": 20, "max_retries": 1, "retry_backoff_s": 0.5})
    t0 = time.monotonic()
    crashed = retrain(cfg, timeout=600)
    ended = time.monotonic()
    proxy.wait_stopped()
    assert proxy.injected["died"] == 1
    assert crashed.returncode == 1, crashed.stdout[-3000:] + crashed.stderr[-3000:]
    assert "Traceback" not in crashed.stderr
    failure = next(line for line in crashed.stderr.splitlines() if line.startswith("Training failed"))
    assert "forward_backward" in failure and proxy.url in failure, crashed.stderr[-2000:]
    # bounded: call_timeout_s on the wait, then the session's close; the SDK's own retries of
    # a refused connection would otherwise run for minutes
    stopped_after = ended - proxy.died_at
    assert stopped_after < 120, stopped_after
    state = read_state(tmp_path / "logs")
    assert state.step == 1 and Path(state.checkpoint_path).name == "checkpoint_step_2"
    assert (Path(state.checkpoint_path) / "tinker_checkpoint.json").is_file()

    proxy.start()  # the service is back, on the same address
    try:
        resumed = retrain(cfg, "--resume", str(tmp_path / "logs"), timeout=600)
    finally:
        proxy.stop()
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert [r["step"] for r in read_jsonl(tmp_path / "logs" / "metrics.jsonl")] == [0, 1, 2, 3]
    assert_no_key(tmp_path)
    print(f"killed mid-step: the run stopped {stopped_after:.0f} s after the service died "
          f"({ended - t0:.0f} s after it started)")
