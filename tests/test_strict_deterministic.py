"""`[backend.options] strict_deterministic` through the real `retrain` command on the tiny
model: the run trains under torch's deterministic algorithms (the metrics say so) and, on the
CPU where a seeded run is bit-exact already, ends with the same adapter as the run without it;
without a seed it is refused before anything loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_run import retrain_process as retrain  # strict mode is process-wide: a process of its own
from tiny_run import write_tiny_run

from retrain.io.log import read_jsonl

pytestmark = pytest.mark.slow


def test_strict_run_is_deterministic_and_equal_to_the_plain_run(tmp_path: Path) -> None:
    strict = write_tiny_run(tmp_path, "strict", tables={"backend.options": {"strict_deterministic": True}})
    plain = write_tiny_run(tmp_path, "plain")
    for cfg in (strict, plain):
        res = retrain(cfg)
        assert res.returncode == 0, res.stderr
    rows = {name: read_jsonl(tmp_path / name / "logs" / "metrics.jsonl") for name in ("strict", "plain")}
    assert all(r["local_strict_deterministic"] == 1 and r["local_torch_deterministic_algorithms"] == 1
               and r["local_cublas_workspace_config"] == ":4096:8" for r in rows["strict"])
    assert all(r["local_strict_deterministic"] == 0 for r in rows["plain"])
    assert [r["loss"] for r in rows["strict"]] == [r["loss"] for r in rows["plain"]]
    name = "adapters/final/adapter_model.safetensors"
    assert (tmp_path / "strict" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes()


def test_strict_without_a_seed_is_refused(tmp_path: Path) -> None:
    cfg = write_tiny_run(tmp_path, training={"seed": -1}, tables={"backend.options": {"strict_deterministic": True}})
    res = retrain(cfg)
    assert res.returncode == 2 and "strict_deterministic needs a seed" in res.stderr and "Traceback" not in res.stderr
