"""Two training processes (torchrun, gloo, FSDP2) sampling on one inference server (`retrain
serve`) two batches ahead: rank 0 alone publishes each version and samples and scores every
batch, the other rank receives them, and both train in lockstep; killed after a checkpoint, the
run resumes with the same prompts from the versions the checkpoint kept."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rows import assert_rows_match
from serving import Served, start_server
from test_inference_run import deterministic, retrain, rl_rows, write_run

from retrain.io.log import read_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("distributed-inference-server")]

SETTINGS = {"max_steps": 4, "save_every": 2, "max_async_level": 2, "batch_size": 2, "group_size": 4}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = start_server(tmp_path_factory.mktemp("server"), "--adapter-root", "/")
    yield served
    served.stop()


def two_processes(root: Path, url: str) -> Path:
    cfg = write_run(root, url, inference={"importance_sampling_correction": True}, **SETTINGS)
    cfg.write_text(cfg.read_text().replace('devices = "cpu"', 'devices = "cpu,cpu"'))
    return cfg


def test_rank_0_samples_for_both_and_a_killed_run_resumes(server: Served, tmp_path: Path) -> None:
    before = server.counters()
    whole = retrain(two_processes(tmp_path / "whole", server.url))
    assert whole.returncode == 0, whole.stderr[-4000:]
    assert "training on 2 processes" in whole.stderr
    rows = rl_rows(tmp_path / "whole")
    assert [r["step"] for r in rows] == [0, 1, 2, 3] and {r["world_size"] for r in rows} == {2}
    assert [r["async/policy_lag"] for r in rows] == [0, 1, 2, 2]
    after = server.counters()
    # one request per prompt per step: rank 1 never asked the server
    assert after["requests_total"] - before["requests_total"] == 4 * SETTINGS["batch_size"]
    # versions 0 to 3 published once each, by rank 0
    assert after["adapter_loads_total"] - before["adapter_loads_total"] == 4
    assert after["adapters"] == before["adapters"]  # and unloaded when the run ended

    cut = two_processes(tmp_path / "cut", server.url)
    assert retrain(cut, crash="after_checkpoint@1").returncode != 0
    resumed = retrain(cut, "--resume", str(tmp_path / "cut" / "logs"))
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert_rows_match(deterministic(rl_rows(tmp_path / "cut")), deterministic(rows), rel=1e-4)

    def prompts(root: Path) -> list[str]:
        return [g["prompt"] for g in read_jsonl(root / "logs" / "emergence" / "generations.jsonl")]

    assert prompts(tmp_path / "whole") == prompts(tmp_path / "cut")
