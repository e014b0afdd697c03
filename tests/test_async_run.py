"""Sampling two batches ahead on the in-process engine (`max_async_level = 2`, pinned versions)
with a supervised warmup, the KL penalty and held-out evaluation after every step: SIGKILLed at
a step drawn at random, then `--resume`d, the run's metrics, logs, evaluations and final adapter
are the uninterrupted run's, bit for bit. The engine's counters are left out of the comparison:
a row counts the sampling that finished since the previous row, which the thread's timing
decides (as on a server)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from test_training_run import outputs, retrain, write_run

from retrain.io.log import read_jsonl

pytestmark = pytest.mark.slow

AHEAD = {"max_async_level": 2, "kl_coef": 0.05}
#: (fault point, RL step): checkpoints follow steps 1, 3 and 5 (save_every = 2)
CRASHES = [("after_step", s) for s in range(1, 6)] + [("mid_checkpoint", 3), ("after_checkpoint", 1),
                                                      ("after_checkpoint", 3)]


def comparable(out: dict[str, object]) -> dict[str, object]:
    rows = out["metrics"]
    assert isinstance(rows, list)
    return {**out, "metrics": [{k: v for k, v in r.items() if not k.startswith("engine_")} for r in rows]}


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("ahead-whole")
    res = retrain(write_run(root, **AHEAD))
    assert res.returncode == 0, res.stderr[-3000:]
    return {"root": root, **comparable(outputs(root))}


def test_the_run_samples_two_batches_ahead_with_warmup_kl_and_evaluation(whole: dict[str, object]) -> None:
    rows = read_jsonl(Path(str(whole["root"])) / "logs" / "metrics.jsonl")
    rl = [r for r in rows if r.get("phase") != "sft"]
    assert [r.get("phase", "rl") for r in rows[:3]] == ["sft"] * 3
    assert [r["async/policy_lag"] for r in rl] == [0, 1, 2, 2, 2, 2]
    assert all(r["kl/mean"] >= 0 for r in rl if r["num_datums"])  # the KL penalty is on
    assert [r["step"] for r in read_jsonl(Path(str(whole["root"])) / "logs" / "eval.jsonl")] == list(range(7))


def test_sigkill_at_a_random_step_then_resume_is_the_uninterrupted_run(whole: dict[str, object],
                                                                      tmp_path: Path) -> None:
    point, step = random.SystemRandom().choice(CRASHES)
    crash = f"{point}@{step}"
    cfg = write_run(tmp_path, **AHEAD)
    killed = retrain(cfg, crash=crash)
    assert killed.returncode != 0, crash
    resumed = retrain(cfg, "--resume", str(tmp_path / "logs"))
    assert resumed.returncode == 0, (crash, resumed.stderr[-3000:])
    got = comparable(outputs(tmp_path))
    for key in ("metrics", "steps", "generations", "eval", "eval_problems", "adapter"):
        assert got[key] == whole[key], (crash, key)
