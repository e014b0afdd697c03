"""Experiment-tree files, derived statuses and evaluation over finished runs (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrain.config.errors import ConfigError
from retrain.tree.eval import evaluate
from retrain.tree.format import render
from retrain.tree.model import load_tree, parse_success
from retrain.tree.state import TreeState

TREE = """
[tree]
name = "t"
[[tree.nodes]]
id = "a"
campaign = "a.toml"
success = "mean_reward >= 0.5"
on_success = ["b"]
on_failure = ["c"]
[[tree.nodes]]
id = "b"
campaign = "b.toml"
on_success = ["d"]
[[tree.nodes]]
id = "c"
campaign = "c.toml"
on_success = ["d"]
[[tree.nodes]]
id = "d"
campaign = "d.toml"
"""


def test_success_conditions() -> None:
    s = parse_success("eval/pass@1 > -0.25")
    assert s is not None and s.metric == "eval/pass@1" and s.value == -0.25 and s.met(0.0) and not s.met(-1)
    assert parse_success("loss <= 1e-3") is not None and parse_success("reward is high") is None


def test_bad_tree_files(tmp_path: Path) -> None:
    (tmp_path / "t.toml").write_text('[tree]\n[[tree.nodes]]\nid = "a"\ncampaign = "x.toml"\non_success = ["zz"]\n'
                                     'success = "reward high"\ncolour = 1\n')
    with pytest.raises(ConfigError) as err:
        load_tree(tmp_path / "t.toml")
    text = str(err.value)
    assert "unknown node 'zz'" in text and "'reward high' is not METRIC OP NUMBER" in text and "colour" in text


def test_statuses_follow_outcomes(tmp_path: Path) -> None:
    (tmp_path / "tree.toml").write_text(TREE)
    tree = load_tree(tmp_path / "tree.toml")
    state = TreeState(tree)
    assert [state.effective(n) for n in "abcd"] == ["pending", "locked", "locked", "locked"]
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0, "mean_reward": 0.2}\n{"step": 1, "mean_reward": 0.75}\n')
    (run / "trainer_state.json").write_text(json.dumps({"checkpoint_name": "final"}))
    a = state.node("a")
    a.status, a.campaign_dir = "done", str(run)
    assert evaluate(tree.nodes["a"], a) == "success" and a.result == {"mean_reward": 0.75, "runs": 1}
    state.save()
    state = TreeState(load_tree(tmp_path / "tree.toml"))  # read back from tree_state.json
    assert [state.effective(n) for n in "abcd"] == ["done", "pending", "skipped", "locked"]
    assert "[✓] a" in render(state) and "[-] c" in render(state)
    state.node("b").status = "done"
    state.node("b").outcome = "failure"
    assert state.effective("d") == "skipped"  # every parent decided, none chose it


def test_campaign_results_average_finished_runs(tmp_path: Path) -> None:
    camp = tmp_path / "camp"
    rewards = {"x_s1": (0.4, "final"), "x_s2": (0.8, "final"), "x_s3": (0.0, "checkpoint_step_2")}
    for name, (reward, checkpoint) in rewards.items():
        d = camp / "runs" / name
        d.mkdir(parents=True)
        (d / "metrics.jsonl").write_text(json.dumps({"step": 3, "mean_reward": reward}) + "\n")
        (d / "trainer_state.json").write_text(json.dumps({"checkpoint_name": checkpoint}))
    (camp / "manifest.json").write_text(json.dumps({"runs": [{"run_name": n} for n in rewards]}))
    (tmp_path / "tree.toml").write_text(TREE)
    tree = load_tree(tmp_path / "tree.toml")
    st = TreeState(tree).node("a")
    st.status, st.campaign_dir = "done", str(camp)
    assert evaluate(tree.nodes["a"], st) == "success" and st.result == {"mean_reward": 0.6, "runs": 2}
