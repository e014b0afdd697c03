"""A GTPO-HICRA run on the tiny model whose planning masks come from the semantic detector,
offline, with the packaged all-MiniLM-L6-v2; a model that is not there fails at the start in
one line instead of falling back to regex."""

from __future__ import annotations

from pathlib import Path

from tiny_run import retrain, write_tiny_run

from retrain.io.log import read_jsonl

# in this process (tiny_run.retrain, or the trainer itself): seconds, so the fast tier


def write(root: Path, model: str = "all-MiniLM-L6-v2") -> Path:
    return write_tiny_run(root, training={"max_tokens": 16},
                          tables={"algorithm": {"algorithm_mode": "maxrl_gtpo_hicra"},
                                  "planning": {"detector": "semantic", "model": model}})


def test_gtpo_hicra_run_with_the_semantic_detector(tmp_path: Path) -> None:
    res = retrain(write(tmp_path))
    assert res.returncode == 0, res.stderr
    rows = read_jsonl(tmp_path / "run" / "logs" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    assert rows[0]["condition"] == "maxrl_gtpo_hicra"
    trained = [r for r in rows if not r["skipped"]]
    assert trained, "every group tied"
    assert all(0.0 <= r["planning_token_fraction"] <= 1.0 for r in trained)


def test_a_missing_model_folder_stops_the_run_in_one_line(tmp_path: Path) -> None:
    res = retrain(write(tmp_path, model=str(tmp_path / "no-such-model")))
    assert res.returncode == 2
    assert "is not a local folder" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "run" / "logs" / "metrics.jsonl").exists()
