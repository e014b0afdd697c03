import json
import os
import time

import msgspec
import pytest

from retrain.status.scan import (
    STALE_AFTER_S,
    Scope,
    campaign_status,
    scan_all,
    scan_run,
    visible,
)


def by_run(report):
    return {r.run: r for r in report.all_runs()}


def test_states_of_a_mixed_log_tree(log_tree):
    report = scan_all(log_tree)
    runs = by_run(report)
    assert {r.run for r in report.runs} == {"live", "done", "crashed", "sleepy", "empty", "nested/torn"}
    assert runs["live"].state == "running" and runs["live"].alive is True
    assert runs["done"].state == "finished" and runs["done"].completed and runs["done"].max_steps == 4
    assert runs["crashed"].state == "dead" and runs["crashed"].alive is False
    assert runs["sleepy"].state == "stale" and runs["sleepy"].stale
    assert runs["sleepy"].age_s > STALE_AFTER_S
    assert runs["empty"].state == "running" and runs["empty"].step is None
    assert runs["nested/torn"].step == 2  # the torn row 3 is not used
    assert runs["live"].trainer == "retrain"


def test_latest_values_come_from_the_last_complete_row(tmp_path, make_run, row):
    run = make_run(tmp_path / "r", rows=[row(0), row(1, loss=0.25, correct_rate=0.5)],
                   tail=b"not json\n" + b'{"step": 2, "loss"')
    s = scan_run(run, Scope(tmp_path), now=time.time())
    assert (s.step, s.loss, s.correct_rate, s.steps_done) == (1, 0.25, 0.5, 2)
    assert s.tokens_per_second == 1001.0 and s.process_max_rss_mb == 513.0
    assert s.train_time_semantics == "synchronous_optimizer_update"
    assert s.wall_time_s == 4.0 and not s.wall_time_estimated
    assert s.train_tokens_per_s is None and s.mfu is None  # a backend that does not report them


def test_the_training_throughput_of_the_last_row_is_shown(tmp_path, make_run, row):
    from retrain.status.format import run_line

    rows = [row(0, train_tokens_per_s=900.0, mfu=0.2), row(1, train_tokens_per_s=1234.4, mfu=0.1875)]
    s = scan_run(make_run(tmp_path / "r", rows=rows), Scope(tmp_path), now=time.time())
    assert (s.train_tokens_per_s, s.mfu) == (1234.4, 0.1875)
    assert "train_tok/s=1234" in run_line(s) and "mfu=18.8%" in run_line(s)


def test_wall_time_is_estimated_from_the_tail_for_long_histories(tmp_path, make_run, row):
    rows = [row(i, step_time_s=1.0) for i in range(100)] + [row(100 + i, step_time_s=3.0) for i in range(20)]
    s = scan_run(make_run(tmp_path / "r", rows=rows), Scope(tmp_path), now=time.time())
    assert s.wall_time_estimated
    assert s.wall_time_s == pytest.approx(3.0 * 120)


def test_the_line_names_the_time_it_shows(tmp_path, make_run, row):
    """The summed step times, not the run's wall time (no model loading, evaluation or
    checkpoints): the label says so, and `~` marks the tail's estimate."""
    from retrain.status.format import run_line

    short = scan_run(make_run(tmp_path / "a", rows=[row(0, step_time_s=40.0), row(1, step_time_s=50.0)]),
                     Scope(tmp_path), now=time.time())
    assert " time_in_steps=1m30s " in run_line(short) and " time=" not in run_line(short)
    long = scan_run(make_run(tmp_path / "b", rows=[row(i, step_time_s=1.0) for i in range(20)]),
                    Scope(tmp_path), now=time.time())
    assert " time_in_steps=20s~ " in run_line(long)


def test_run_meta_failure_and_missing_pid_files(tmp_path, make_run):
    run = make_run(tmp_path / "r", 3, meta={"status": "failed", "failure_status": "exception:ValueError"})
    s = scan_run(run, Scope(tmp_path), now=time.time())
    assert s.state == "failed" and s.failed and s.failure == "exception:ValueError"
    assert s.pid is None and s.alive is None


def test_half_written_state_and_meta_count_as_absent(tmp_path, make_run):
    run = make_run(tmp_path / "r", 3)
    (run / "trainer_state.json").write_text('{"step": 2, "checkpoint_name": "fi')
    (run / "run_meta.json").write_text("[1, 2")
    (run / "run.pid").write_text("")
    s = scan_run(run, Scope(tmp_path), now=time.time())
    assert s.state == "running" and not s.completed and s.trainer is None and s.pid is None


def test_pid_mark_in_stderr_log_is_a_fallback(tmp_path, make_run, gone_pid):
    run = make_run(tmp_path / "r", 3)
    (run / "stderr.log").write_text(f"launching (pid={gone_pid}) now\n")
    s = scan_run(run, Scope(tmp_path), now=time.time())
    assert s.pid == gone_pid and s.state == "dead"


def test_reused_pid_counts_as_dead(tmp_path, make_run):
    # Our own process is alive, but a pid file written long before it started names another.
    run = make_run(tmp_path / "r", 3, pid=os.getpid())
    stamp = time.time() - 10 * 86400
    os.utime(run / "run.pid", (stamp, stamp))
    assert scan_run(run, Scope(tmp_path), now=time.time()).state == "dead"


def test_stale_with_live_pid_is_stale_not_running(tmp_path, make_run):
    run = make_run(tmp_path / "r", 3, pid=os.getpid(), age_s=STALE_AFTER_S + 60)
    os.utime(run / "run.pid")
    assert scan_run(run, Scope(tmp_path), now=time.time()).state == "stale"


def test_campaign_matrix_counts_and_status(log_tree):
    report = scan_all(log_tree)
    [c] = report.campaigns
    assert c.run == "campaign_20260101_000000"
    assert c.conditions == ["grpo+none", "maxrl+gtpo"] and c.seeds == [42, 101]
    assert c.num_runs == 4 and c.completed == 1 and c.failed == 1
    assert c.counts["running"] == 1 and c.counts["pending"] == 1
    assert c.status == "running" and c.runner_alive is True
    assert c.matrix["grpo+none"]["42"] == pytest.approx(0.19)
    assert c.matrix["maxrl+gtpo"]["101"] is None
    cells = {(r.condition, r.seed): r.state for r in c.runs}
    assert cells == {("grpo+none", 42): "finished", ("grpo+none", 101): "running",
                     ("maxrl+gtpo", 42): "failed", ("maxrl+gtpo", 101): "pending"}
    # Campaign runs are not standalone runs.
    assert not any(r.run.startswith("campaign_") for r in report.runs)


def test_manifest_returncode_marks_failure(tmp_path, make_campaign):
    make_campaign(tmp_path, "campaign_x", ["a+b"], [1, 2], runs={("a+b", 1): {"steps": 3}, ("a+b", 2): {"steps": 3, "final": True}},
                  returncodes={("a+b", 1): 1, ("a+b", 2): 0})
    [c] = scan_all(tmp_path).campaigns
    assert c.failed == 1 and c.completed == 1 and c.status == "done"
    assert next(r for r in c.runs if r.seed == 1).failure == "exit_code:1"


def test_campaign_status_rules():
    def runs(*states):
        return [msgspec.structs.replace(_blank(), state=s) for s in states]

    assert campaign_status(runs("finished", "failed"), None) == "done"
    assert campaign_status(runs("finished", "running"), None) == "running"
    assert campaign_status(runs("finished", "stale"), True) == "running"
    assert campaign_status(runs("finished", "stale"), False) == "partial"
    assert campaign_status(runs("dead", "pending"), None) == "dead"
    assert campaign_status([], None) == "dead"
    assert campaign_status([], True) == "running"


def _blank():
    from retrain.status.scan import RunSummary

    return RunSummary(run="r", path="r", state="pending")


def test_unreadable_manifest_falls_back_to_run_folders(tmp_path, make_run):
    campaign = tmp_path / "campaign_y"
    make_run(campaign / "runs" / "grpo+none_s7", 3)
    (campaign / "manifest.json").write_text('{"conditions": ["grpo+n')
    [c] = scan_all(tmp_path).campaigns
    assert c.error and c.conditions == ["grpo+none"] and c.seeds == [7]
    assert c.runs[0].state == "running"


def test_root_that_is_a_campaign_or_a_run(log_tree):
    campaign = log_tree / "campaign_20260101_000000"
    report = scan_all(campaign)
    assert len(report.campaigns) == 1 and report.runs == []
    report = scan_all(log_tree / "live")
    assert [r.run for r in report.runs] == ["."]


def test_default_view_hides_idle_ended_campaigns(tmp_path, make_campaign):
    make_campaign(tmp_path, "campaign_old", ["a+b"], [1], runs={("a+b", 1): {"steps": 2, "final": True, "age_s": 3 * 86400}})
    make_campaign(tmp_path, "campaign_new", ["a+b"], [1], runs={("a+b", 1): {"steps": 2, "final": True}})
    report = scan_all(tmp_path)
    assert [c.run for c in visible(report, show_all=False).campaigns] == ["campaign_new"]
    assert len(visible(report, show_all=True).campaigns) == 2


def test_confined_scope_ignores_paths_outside_the_root(tmp_path, make_run, make_campaign):
    outside = make_run(tmp_path / "outside", 5)
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    campaign = make_campaign(root, "campaign_z", ["a+b"], [1])
    manifest = json.loads((campaign / "manifest.json").read_text())
    manifest["runs"][0]["log_dir"] = str(outside)
    manifest["runs"][0]["run_name"] = "elsewhere"
    (campaign / "manifest.json").write_text(json.dumps(manifest))
    (root / "inside").mkdir()
    (root / "inside" / "metrics.jsonl").symlink_to(outside / "metrics.jsonl")

    free = scan_all(root)
    assert next(r for r in free.campaigns[0].runs).step == 4

    confined = scan_all(root, confined=True)
    assert confined.campaigns[0].runs[0].step is None
    inside = next(r for r in confined.runs if r.run == "inside")
    assert inside.step is None
    assert "link" not in {r.run for r in confined.runs}  # symlinked folders are not followed


def test_report_serializes_to_json(log_tree):
    data = json.loads(msgspec.json.encode(scan_all(log_tree)))
    assert set(data) == {"root", "generated_at", "runs", "campaigns"}
    assert {"run", "state", "step", "correct_rate", "wall_time_s"} <= set(data["runs"][0])


@pytest.mark.parametrize("meta", [{"max_steps": 50}, {"config": {"max_steps": 50}},
                                  {"config": {"training": {"max_steps": 50}}}])
def test_max_steps_of_a_standalone_run_comes_from_run_meta(tmp_path, make_run, meta):
    run = make_run(tmp_path / "r", 3, meta=meta)
    assert scan_run(run, Scope(tmp_path), now=time.time()).max_steps == 50


def test_latest_held_out_evaluation(log_tree):
    runs = by_run(scan_all(log_tree))
    done = runs["done"]
    assert (done.eval_step, done.eval_k, done.eval_pass_at_1, done.eval_pass_at_k) == (4, 4, 0.6, 1.0)
    assert runs["live"].eval_pass_at_1 is None and runs["live"].eval_step is None


def test_a_torn_or_foreign_eval_row_counts_as_absent(tmp_path, make_run):
    run = make_run(tmp_path / "r", 2, evals=[])
    (run / "eval.jsonl").write_text('{"step": 1, "eval/k": 4, "eval/pass@1": 0.5}\n{"step": 2, "eval/k"')
    assert scan_run(run, Scope(tmp_path), now=time.time()).eval_pass_at_1 is None  # no pass@4: not a row
