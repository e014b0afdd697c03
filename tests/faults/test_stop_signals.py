"""A run told to stop (Ctrl-C, or SIGTERM and SIGHUP, which Slurm, Kubernetes, Docker,
systemd and preemptible clouds send) finishes the step in flight, saves a checkpoint, records
`interrupted` in run_meta.json, exits 128 + the signal's number and resumes to the run it would
have been; a repeated SIGTERM is the same request, a second Ctrl-C stops at once; reward
workers outlive a stop that reaches the whole process group; two processes stop after the same
step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fault_run import cut, meta, rows, signalling_run
from test_training_run import (
    outputs,
    reference,  # noqa: F401  (a fixture: the uninterrupted run)
    write_run,
)
from tiny_run import Messages

from retrain.io.log import read_jsonl
from retrain.training.interrupt import RunInterrupted, StopRequest
from retrain.training.trainers import train
from retrain.validation.load import load_config


def test_the_first_signal_asks_a_repeated_sigterm_asks_again_and_a_second_ctrl_c_stops_now() -> None:
    said: list[str] = []
    stop = StopRequest(said.append)
    with stop.installed():
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGHUP)
    assert stop.requested and stop.signum == signal.SIGTERM
    assert said == ["SIGTERM: finishing this step, then saving a checkpoint",
                    "SIGTERM again: already stopping after this step", "SIGHUP again: already stopping after this step"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored
    ctrl_c = StopRequest(said.append)
    with ctrl_c.installed(), pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        assert ctrl_c.requested
        os.kill(os.getpid(), signal.SIGINT)
    assert said[-1] == "interrupt: finishing this step, then saving a checkpoint (Ctrl-C again to stop now)"
    # torchrun hands each rank the stop it got; the terminal's Ctrl-C then arrives twice
    ranked = StopRequest(said.append, distributed=True)
    with ranked.installed():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
    assert said[-2:] == ["interrupt: finishing this step, then saving a checkpoint",
                         "interrupt again: already stopping after this step"]
    error = StopRequest(said.append)
    error.ask(signal.SIGHUP)
    stopped = error.interrupted("step 3", "checkpoint saved: x", "resume with: y")
    assert (str(stopped), stopped.exit_code, stopped.hint) == ("stopped by SIGHUP after step 3; checkpoint saved: x",
                                                              129, "resume with: y")


def test_the_ranks_stop_on_rank_0s_word() -> None:
    """`agreed` hands rank 0's request to every rank: a rank the signal reached alone goes on,
    and every rank stops when rank 0 does."""
    follower = StopRequest(lambda _: None, distributed=True)
    follower.ask(signal.SIGTERM)
    assert not follower.agreed(lambda value: (False, signal.SIGINT))
    quiet = StopRequest(lambda _: None, distributed=True)
    assert quiet.agreed(lambda value: (True, signal.SIGTERM)) and quiet.signum == signal.SIGTERM


def test_reward_workers_outlive_a_stop_sent_to_the_whole_group(tmp_path: Path) -> None:
    (tmp_path / "same.py").write_text("class Same:\n    def score(self, response, reference):\n"
                                      "        return float(response == reference)\n")
    proc = subprocess.Popen([sys.executable, "-m", "retrain.rewards.worker", "same:Same"], cwd=tmp_path,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert json.loads(proc.stdout.readline()) == {"ready": True}
        for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            proc.send_signal(stop)
        proc.stdin.write(json.dumps({"i": 0, "response": "4", "reference": "4"}) + "\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["value"] == 1.0
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0  # it ends when the trainer closes its input
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_finish_the_step_save_and_record_interrupted(in_root: Path, name: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNAL_NAME", name)
    monkeypatch.setenv("SIGNAL_AT_CALLS", "3")  # in step 0
    config = load_config(signalling_run(in_root, max_steps=3, save_every=0), [], import_plugins=False).config
    messages = Messages()
    with pytest.raises(RunInterrupted) as stopped:
        train(config, messages)
    assert f"{name}: finishing this step, then saving a checkpoint" in messages.lines
    saved = in_root / "run" / "adapters" / "checkpoint_step_1"
    assert str(stopped.value) == f"stopped by {name} after step 0; checkpoint saved: {saved}"
    assert stopped.value.exit_code == 128 + getattr(signal, name)
    assert "--resume" in stopped.value.hint
    logs = in_root / "run" / "logs"
    assert meta(logs)["status"] == "interrupted" and len(read_jsonl(logs / "metrics.jsonl")) == 1
    assert json.loads((logs / "trainer_state.json").read_text())["checkpoint_path"] == str(saved)
    assert (saved / "digests.json").is_file()


def test_a_second_ctrl_c_stops_at_once_and_leaves_the_last_checkpoint(in_root: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNAL_NAME", "SIGINT")
    monkeypatch.setenv("SIGNAL_AT_CALLS", "10")  # in step 1, after step 0's checkpoint, and a second later
    monkeypatch.setenv("SIGNAL_AGAIN_AFTER_S", "1")
    config = load_config(signalling_run(in_root, max_steps=3), [], import_plugins=False).config
    with pytest.raises(KeyboardInterrupt):
        train(config, Messages())
    logs = in_root / "run" / "logs"
    assert len(read_jsonl(logs / "metrics.jsonl")) == 1  # step 1 never finished
    state = json.loads((logs / "trainer_state.json").read_text())
    assert state["step"] == 0 and state["checkpoint_name"] == "checkpoint_step_1"
    assert meta(logs)["status"] == "failed" and meta(logs)["failure_status"] == "exception:KeyboardInterrupt"


@pytest.mark.slow
def test_sigterm_mid_step_then_resume_is_bit_identical(reference: dict[str, object],  # noqa: F811
                                                       tmp_path: Path, spawn: Any) -> None:
    """The SIGKILL crash matrix's run (tests/test_training_run.py), told to stop by SIGTERM from
    outside once its 5th row (warmup 0-2, RL 0-1) is on disk: it stops after the step in flight
    with status 143, and the resumed run ends bit-identical to the uninterrupted one."""
    cfg = write_run(tmp_path)
    run = cut(spawn(cfg), tmp_path / "logs", 5, signal.SIGTERM)
    assert run.wait() == 143, run.stderr()[-3000:]
    logs = tmp_path / "logs"
    assert meta(logs)["status"] == "interrupted" and "stopped by SIGTERM after step" in run.stderr()
    assert "resume with: retrain" in run.stderr() and not (logs / "run.pid").exists()
    done = [r for r in read_jsonl(logs / "metrics.jsonl") if r.get("phase") != "sft"]
    assert json.loads((logs / "trainer_state.json").read_text())["step"] == done[-1]["step"] < 5
    check = subprocess.run([sys.executable, "-m", "retrain.cli", "resume-check", str(logs), "--json"],
                           capture_output=True, text=True, timeout=120, check=False)
    assert check.returncode == 0 and json.loads(check.stdout)["digests"] == "verified", check.stdout
    resumed = spawn(cfg, "--resume", str(logs))
    assert resumed.wait() == 0, resumed.stderr()[-3000:]
    got = outputs(tmp_path)
    for key in ("metrics", "steps", "generations", "eval", "eval_problems", "adapter"):
        assert got[key] == reference[key], key


@pytest.mark.slow
def test_sigterm_while_the_model_loads_stops_before_the_first_step(tmp_path: Path, spawn: Any) -> None:
    """run_meta.json says `running` once the stop handler is in place, before the model loads:
    a SIGTERM then stops the run at the first step's end at the latest, recorded `interrupted`."""
    cfg = write_run(tmp_path, max_steps=2, sft_warmup_steps=0)
    run = spawn(cfg)
    run.wait_for(lambda: (tmp_path / "logs" / "run_meta.json").exists())
    run.signal(signal.SIGTERM)
    assert run.wait() == 143, run.stderr()[-3000:]
    assert meta(tmp_path / "logs")["status"] == "interrupted"
    assert rows(tmp_path / "logs") <= 1, run.stderr()[-3000:]
