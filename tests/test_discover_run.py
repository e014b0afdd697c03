"""A TTT-Discover run on the tiny model through the real `retrain` command: two steps that
write `discover_*` rows, prompts carrying the discovery memory, and the final archive."""

from __future__ import annotations

import json
from pathlib import Path

from tiny_run import retrain, write_tiny_run

from retrain.io.log import read_jsonl

# in this process (tiny_run.retrain, or the trainer itself): seconds, so the fast tier


def test_two_step_discover_run(tmp_path: Path) -> None:
    cfg = write_tiny_run(tmp_path, training={"trainer": "ttt_discover"},
                         tables={"algorithm": {"algorithm_mode": "ttt_discover_entropic"},
                                 "algorithm.params": {"context_k": 2}})
    res = retrain(cfg)
    assert res.returncode == 0, res.stderr
    logs = tmp_path / "run" / "logs"
    rows = read_jsonl(logs / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        assert r["discover_archive_size"] == 1 + (r["step"] + 1) * 8
        assert "discover_beta" in r and r["discover_beta"] >= 0
    assert any(r["discover_beta"] > 0 for r in rows), "no group had spread"
    generations = read_jsonl(logs / "emergence" / "generations.jsonl")
    assert generations and all("Discovery memory:" in g["prompt"] for g in generations)
    second = [g for g in generations if g["step"] == 1]
    assert any("Other promising attempts:" in g["prompt"] for g in second)
    archive = json.loads((logs / "discover_archive.json").read_text())
    entries = archive["entries"]
    assert len(entries) == 17 and archive["n_total"] == 4
    assert entries[0]["parent"] is None and entries[0]["text"] == ""
    best = max(e["reward"] for e in entries)
    assert rows[-1]["discover_archive_best_reward"] == best
    assert (tmp_path / "run" / "adapters" / "final" / "adapter_model.safetensors").exists()
