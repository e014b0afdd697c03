"""`retrain explain` refuses what the run refuses before it starts: the run's flow preflight
(`retrain.validation.trace`) is part of explain for the trainers that start with it, so an
algorithm plugin that loads but gives a group the wrong number of advantages fails explain,
trace and the run alike, with the same line and exit status 2 for explain and the run."""

from __future__ import annotations

from pathlib import Path

from tiny_run import retrain, write_tiny_run

BROKEN = '''
def short(rewards):
    return rewards[:-1]  # one advantage too few for the group
'''


def test_explain_trace_and_the_run_refuse_a_plugin_the_preflight_refuses(tmp_path: Path) -> None:
    (tmp_path / "broken_adv.py").write_text(BROKEN)
    cfg = write_tiny_run(tmp_path, tables={"algorithm": {"advantage_mode": "broken_adv.short", "transform_mode": "none"}})
    explained, traced, ran = retrain(cfg, "explain"), retrain(cfg, "trace"), retrain(cfg)
    line = "training flow validation failed: probe "
    assert explained.returncode == 2 and line in explained.stderr, explained.stderr
    assert traced.returncode == 1 and "[ERROR] [probe]" in traced.stdout, traced.stdout
    assert ran.returncode == 2 and line in ran.stderr, ran.stderr
    first = next(s for s in explained.stderr.splitlines() if line in s)
    assert first.split(line, 1)[1][:40] in ran.stderr
    assert not (tmp_path / "run" / "adapters").exists()
