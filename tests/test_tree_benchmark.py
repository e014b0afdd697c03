"""`retrain tree` over three nodes that train the tiny model for real, and `retrain benchmark`
of a tiny config repeated in fresh processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from retrain.io.log import read_jsonl

pytestmark = pytest.mark.slow


def write_config(path: Path, log_dir: str, steps: int = 1) -> Path:
    path.write_text(f"""
[model]
model = "tiny"
lora_rank = 2
[backend]
devices = "cpu"
adapter_path = "{path.parent / 'adapters' / path.stem}"
[training]
seed = 3
max_steps = {steps}
batch_size = 2
group_size = 2
max_tokens = 4
save_every = 0
[data]
source = "arithmetic"
[logging]
log_dir = "{log_dir}"
""")
    return path


TREE = """
[tree]
name = "demo"
description = "three nodes"
[[tree.nodes]]
id = "base"
label = "the baseline"
campaign = "base.toml"
success = "mean_reward >= -1"
on_success = ["bigger"]
on_failure = ["debug"]
[[tree.nodes]]
id = "bigger"
campaign = "bigger.toml"
success = "mean_reward > 2"
[[tree.nodes]]
id = "debug"
campaign = "debug.toml"
"""


def test_tree_runs_notes_and_unlocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from retrain.cli import app

    monkeypatch.chdir(tmp_path)
    for name in ("base", "bigger", "debug"):
        write_config(tmp_path / f"{name}.toml", str(tmp_path / "logs" / name))
    (tmp_path / "tree.toml").write_text(TREE)

    def tree(*args: str) -> tuple[int, str, str]:
        res = CliRunner().invoke(app, ["tree", *args], prog_name="retrain")
        if res.exception and not isinstance(res.exception, SystemExit):
            raise res.exception
        return res.exit_code, res.stdout, res.stderr

    code, out, _ = tree()
    assert code == 0 and "[ ] base" in out and "[#] bigger" in out and "[#] debug" in out
    code, _, err = tree("run", "bigger")
    assert code == 2 and "node bigger is locked" in err
    assert tree("note", "base", "first try, seed 3")[0] == 0
    code, out, _ = tree("run", "base")
    assert code == 0, out
    assert "base: success (mean_reward=" in out and "unlocked: bigger" in out
    state = json.loads((tmp_path / "tree_state.json").read_text())
    rows = read_jsonl(tmp_path / "logs" / "base" / "metrics.jsonl")
    assert state["base"]["result"]["mean_reward"] == round(rows[-1]["mean_reward"], 4)
    assert state["base"]["annotations"][0]["text"] == "first try, seed 3"
    # `eval` decides a done node that has no outcome yet (e.g. its run was resumed elsewhere)
    state["base"]["outcome"], state["base"]["result"] = None, {}
    (tmp_path / "tree_state.json").write_text(json.dumps(state))
    code, out, _ = tree("eval")
    assert code == 0 and out.startswith("base: success (mean_reward=")
    assert json.loads((tmp_path / "tree_state.json").read_text())["base"]["outcome"] == "success"
    assert tree("eval")[1].startswith("Nothing to evaluate")
    code, out, _ = tree("--json")
    nodes = {n["id"]: n for n in json.loads(out)["nodes"]}
    assert nodes["base"]["outcome"] == "success" and nodes["bigger"]["status"] == "pending"
    assert nodes["debug"]["status"] == "skipped"
    assert tree("next")[1].startswith("Ready to run:\n  bigger: bigger.toml")
    code, out, _ = tree("run", "bigger")
    assert code == 0 and "bigger: failure" in out
    code, out, _ = tree("show", "base")
    assert "first try, seed 3" in out and "success: mean_reward >= -1" in out
    assert tree("reset", "bigger")[0] == 0
    assert json.loads(tree("--json")[1])["nodes"][1]["status"] == "pending"


def test_benchmark_repeats_and_summaries(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "bench.toml", str(tmp_path / "logs" / "bench"), steps=2)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    suite = tmp_path / "suite"
    res = subprocess.run([sys.executable, "-m", "retrain.cli", "benchmark", str(cfg), "--repeat", "2",
                          "--output-dir", str(suite), "--json", "--lr", "0.01"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=900, check=False)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert [r["label"] for r in data["runs"]] == ["repeat_00", "repeat_01"]
    assert all(r["steps"] == 2 and r["process_wall_s"] > r["wall_time_s"] > 0 for r in data["runs"])
    walls = [r["wall_time_s"] for r in data["runs"]]
    agg = data["aggregate"]["wall_time_s"]
    assert agg["minimum"] == min(walls) and agg["maximum"] == max(walls)
    assert agg["stdev"] == pytest.approx(abs(walls[0] - walls[1]) / 2)
    # the spread of s/step, tokens/s and the final reward, as the issue asks
    assert {"mean_step_time_s", "mean_tokens_per_second", "final_mean_reward"} <= set(data["aggregate"])
    for r in data["runs"]:
        rows = read_jsonl(Path(r["path"]) / "metrics.jsonl")
        assert r["mean_step_time_s"] == pytest.approx(r["wall_time_s"] / 2)
        assert r["mean_tokens_per_second"] == pytest.approx(sum(x["tokens_per_second"] for x in rows) / 2)
    # seeded: the repeats train identically, only their timings differ
    assert data["runs"][0]["final_mean_reward"] == data["runs"][1]["final_mean_reward"]
    assert data["aggregate"]["final_mean_reward"]["stdev"] == 0
    meta = json.loads((suite / "benchmark_meta.json").read_text())
    assert meta["repeats"] == 2 and meta["wandb_disabled"] is True
    assert json.loads((suite / "repeat_00" / "run_meta.json").read_text())["config"]["lr"] == 0.01
    for target in (suite, suite / "repeat_01"):
        res = subprocess.run([sys.executable, "-m", "retrain.cli", "benchmark", str(target)], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode == 0 and "mean_step_time_s" in res.stdout, res.stderr
