"""A run whose reward failed on every completion does not end as a success blaming reward
sparsity: two RL steps of the tiny model judged by a judge on 127.0.0.1 that answers every
request 503 (fewer steps than `max_error_steps`, so the error budget never stops it) end with
exit status 3, the reward-fault budget's, saying that the reward scored none of the run's
completions and naming the judge's error; the state records it for `retrain status`."""

from __future__ import annotations

import json
from pathlib import Path

from faulty_http import FaultyServer
from tiny_run import retrain, write_tiny_run

from retrain.io.log import read_jsonl
from retrain.training.idle import IdleSteps

CUSTOM = 'type = "custom"\ncustom_module = "toy_reward"'


def test_a_run_whose_judge_never_answered_fails_with_the_judge_named(tmp_path: Path) -> None:
    with FaultyServer("ok", status=503, body=b'{"error": "overloaded"}') as judge:
        cfg = write_tiny_run(tmp_path, training={"max_steps": 2})
        cfg.write_text(cfg.read_text().replace(CUSTOM, f'type = "judge"\njudge_base_url = "{judge.url}/v1"\n'
                                                       'judge_api_key_env = ""\njudge_retries = 0\n'))
        res = retrain(cfg)
    assert res.returncode == 3, res.stdout + res.stderr
    rows = read_jsonl(tmp_path / "run" / "logs" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1] and all(r["reward_errors"] == 8 for r in rows)
    (error,) = [line for line in res.stderr.splitlines() if "the reward scored none" in line]
    assert error.startswith("retrain: the reward scored none of the run's 16 completions (2 RL steps): "), error
    assert "a judge that could not be reached: HTTP 503" in error and "checkpoint saved" in error, error
    assert "Run complete" not in res.stdout
    assert "too sparse" not in res.stdout + res.stderr and "Traceback" not in res.stderr
    state = json.loads((tmp_path / "run" / "logs" / "trainer_state.json").read_text())
    idle = IdleSteps(**state["idle"])
    assert idle.unscored == 16 and idle.scored == 0
    assert (idle.verdict() or "").startswith("no RL step trained: the reward failed on most completions")
    meta = json.loads((tmp_path / "run" / "logs" / "run_meta.json").read_text())
    assert meta["status"] == "failed"
