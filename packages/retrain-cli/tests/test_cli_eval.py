"""`retrain eval`: which policies it scores, and one clear line (exit 2) for bad input, all
before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrain.commands.eval.policies import Policy, select
from retrain.errors import UserError

CONFIG = """
[model]
model = "tiny"
[backend]
devices = "cpu"
[data]
source = "{source}"
"""


def write_config(tmp_path: Path, source: str = "arithmetic") -> Path:
    path = tmp_path / "run.toml"
    path.write_text(CONFIG.format(source=source))
    return path


def finished_run(tmp_path: Path, adapters: list[str], latest: str = "final", step: int = 5) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in adapters:
        (tmp_path / "adapters" / name).mkdir(parents=True)
    (logs / "trainer_state.json").write_text(json.dumps(
        {"step": step, "checkpoint_name": latest, "checkpoint_path": str(tmp_path / "adapters" / latest)}))
    return logs


@pytest.mark.parametrize(("args", "message"), [
    (["--adapter", "a", "--run", "b"], "--adapter and --run are exclusive"),
    (["--all-checkpoints"], "--all-checkpoints needs --run LOG_DIR"),
    (["--adapter", "nowhere"], "--adapter nowhere: no such folder"),
    (["--run", "nowhere"], "--run nowhere: no such folder"),
])
def test_bad_options(cli, tmp_path: Path, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    res = cli("eval", str(write_config(tmp_path)), *args)
    assert res.code == 2 and res.stderr.startswith(f"error: {message}"), res.stderr
    assert "Traceback" not in res.stderr


def test_a_source_without_a_held_out_split(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "my_source.py").write_text("def load(config):\n    return [{'prompt': '1+1=', 'reference': '2'}]\n")
    res = cli("eval", str(write_config(tmp_path, "my_source.load")))
    assert res.code == 2 and "has no held-out split: set [eval] data_path" in res.stderr, res.stderr


def test_a_run_without_a_checkpoint(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "logs").mkdir()
    res = cli("eval", str(write_config(tmp_path)), "--run", "logs")
    assert res.code == 2 and "holds no trainer_state.json" in res.stderr


def test_policies_of_a_run(tmp_path: Path) -> None:
    logs = finished_run(tmp_path, ["checkpoint_step_10", "checkpoint_step_2", "warmup_step_4", "final"])
    a = tmp_path / "adapters"
    assert select(None, None, False) == [Policy("base", None, 0)]
    assert select(None, str(logs), False) == [Policy("final", str(a / "final"), 6)]
    assert select(None, str(logs), True) == [Policy("checkpoint_step_2", str(a / "checkpoint_step_2"), 2),
                                             Policy("checkpoint_step_10", str(a / "checkpoint_step_10"), 10),
                                             Policy("final", str(a / "final"), 6)]
    assert select(str(a / "checkpoint_step_2"), None, False) == [
        Policy(str(a / "checkpoint_step_2"), str(a / "checkpoint_step_2"), 2)]


def test_an_unfinished_run_is_scored_at_its_latest_checkpoint(tmp_path: Path) -> None:
    logs = finished_run(tmp_path, ["checkpoint_step_2"], latest="checkpoint_step_2", step=1)
    [policy] = select(None, str(logs), False)
    assert (policy.label, policy.rl_steps) == ("checkpoint_step_2", 2)
    (tmp_path / "adapters" / "checkpoint_step_2").rmdir()
    with pytest.raises(UserError, match="is missing"):
        select(None, str(logs), False)


def test_help_and_manual(cli) -> None:  # type: ignore[no-untyped-def]
    assert "eval" in cli("--help").stdout.split("Commands:")[1]
    usage = cli("eval", "--help").stdout
    for option in ("--adapter", "--run", "--all-checkpoints", "--k", "--max-examples", "--json"):
        assert option in usage
    for topic in ("eval", "evaluation"):
        text = cli("man", topic).stdout
        assert "EVALUATION" in text and "retrain eval CONFIG --run LOG_DIR --all-checkpoints" in text
        assert "eval/step_N.jsonl" in text
