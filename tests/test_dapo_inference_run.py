"""Dynamic sampling with the asynchronous producer on an inference server: `max_async_level =
1` samples every round of step k+1 on `retrain serve` while step k trains, a batch is full
unless its last extra round ran, and a run killed after a checkpoint resumes to the same rows
as an uninterrupted one (the in-flight batch, its extra rounds included, is sampled again from
the same weights and seeds)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rows import assert_rows_match
from serving import Served, start_server
from test_inference_run import deterministic, retrain, rl_rows, write_run

from retrain.io.log import read_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("dapo-inference-run-server")]

# the first character's parity: about half the groups of two completions tie
PARITY = '''
def score(response, reference):
    return float(bool(response) and ord(response[0]) % 2 == 0)
'''


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = start_server(tmp_path_factory.mktemp("server"), "--adapter-root", "/")
    yield served
    served.stop()


def dapo_run(root: Path, url: str) -> Path:
    cfg = write_run(root, url, max_steps=4, save_every=2, max_async_level=1, batch_size=3, group_size=2,
                    dynamic_sampling=True, dynamic_sampling_max_rounds=3)
    (root / "toy_reward.py").write_text(PARITY)
    return cfg


def test_async_dynamic_sampling_fills_batches_and_resumes_exactly(server: Served, tmp_path: Path) -> None:
    whole = dapo_run(tmp_path / "whole", server.url)
    res = retrain(whole)
    assert res.returncode == 0, res.stderr
    rows = rl_rows(tmp_path / "whole")
    assert [r["async/policy_lag"] for r in rows] == [0, 1, 1, 1]
    assert sum(r["dynamic/extra_rounds"] for r in rows) > 0 and sum(r["dynamic/groups_dropped"] for r in rows) > 0
    # a batch is full, or short after the last of its 3 extra rounds, and trains what it kept
    assert all(r["dynamic/batch_fill"] == 1.0 or r["dynamic/extra_rounds"] == 3 for r in rows), rows
    assert all(r["num_datums"] == round(2 * 3 * r["dynamic/batch_fill"]) for r in rows), rows
    # every round's prompts come from the cursor in turn: the next step starts where the last round ended
    prompts = [g["prompt"] for g in read_jsonl(tmp_path / "whole" / "logs" / "emergence" / "generations.jsonl")]
    assert len(prompts) == sum(int(r["dynamic/groups_sampled"]) for r in rows)

    cut = dapo_run(tmp_path / "cut", server.url)
    assert retrain(cut, crash="after_checkpoint@1").returncode != 0
    resumed = retrain(cut, "--resume", str(tmp_path / "cut" / "logs"))
    assert resumed.returncode == 0, resumed.stderr
    assert len(rows) == 4
    assert_rows_match(deterministic(rl_rows(tmp_path / "cut")), deterministic(rows), rel=1e-4)
    again = [g["prompt"] for g in read_jsonl(tmp_path / "cut" / "logs" / "emergence" / "generations.jsonl")]
    assert again == prompts
