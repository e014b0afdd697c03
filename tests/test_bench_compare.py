"""`make bench-compare`'s arithmetic: which rows count as RL and warmup steps, the medians,
the head/ref ratios, and the derived config it runs (scripts/bench/compare.py)."""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def compare() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_compare", REPO / "scripts" / "bench" / "compare.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_step_figures_leave_out_rl_step_zero_and_split_warmup(tmp_path: Path) -> None:
    rows = [{"step": i, "phase": "sft", "step_time_s": 0.5 + i} for i in range(3)]
    rows += [{"step": 0, "step_time_s": 9.0, "sample_time_s": 8.0, "train_time_s": 1.0}]
    rows += [{"step": i, "step_time_s": t, "sample_time_s": t / 2, "train_time_s": t / 2}
             for i, t in enumerate((1.0, 3.0, 2.0), start=1)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = compare().step_figures(path)
    assert got["rl_s_per_step"] == 2.0 and got["rl_sample_s_per_step"] == 1.0 and got["rl_train_s_per_step"] == 1.0
    assert got["warmup_s_per_step"] == 1.5 and got["rl_steps"] == 4 and got["warmup_steps"] == 3


def test_summaries_and_ratios() -> None:
    c = compare()
    head = c.summarise([{"rl_s_per_step": 1.0}, {"error": "exit 1"}, {"rl_s_per_step": 3.0}])
    assert head == {"rl_s_per_step": 2.0, "rounds": 2, "failed_rounds": 1}
    ref = c.summarise([{"rl_s_per_step": 4.0}])
    assert c.ratios(head, ref) == {"rl_s_per_step": 0.5}
    assert c.summarise([{"error": "exit 2: unknown key"}]) == {"error": "exit 2: unknown key"}


def test_the_derived_config_turns_evaluation_off_and_writes_under_the_run(tmp_path: Path) -> None:
    path = compare().config(REPO / "retrain.toml", tmp_path, {"training": {"max_steps": 40, "save_every": 0}})
    tables = tomllib.loads(path.read_text())
    source = tomllib.loads((REPO / "retrain.toml").read_text())
    assert tables["training"] == {**source["training"], "max_steps": 40, "save_every": 0}
    assert tables["eval"] == {"before_train": False, "at_end": False}
    assert tables["logging"]["log_dir"] == str(tmp_path / "logs")
    assert tables["backend"]["options"] == source["backend"]["options"]
