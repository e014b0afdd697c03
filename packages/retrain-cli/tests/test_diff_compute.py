import pytest

from retrain.diff.compute import average, compare, load_condition, load_run, winner
from retrain.diff.format import buckets, render, sparkline


def test_load_run_reads_finals_perf_wall_and_curve(tmp_path, make_run, row):
    rows = [row(0, correct_rate=0.1), row(1, correct_rate=0.4, loss=0.2, process_max_rss_mb=900.0)]
    side = load_run(make_run(tmp_path / "a", rows=rows, tail=b'{"step": 2, "lo'), "a")
    assert side.final == {"loss": 0.2, "correct_rate": 0.4, "mean_reward": 0.11}
    assert side.steps == 2 and side.wall_time_s == 4.0
    assert side.curve == [0.1, 0.4]
    assert side.perf["mean_step_time_s"] == 2.0 and side.perf["peak_process_max_rss_mb"] == 900.0
    assert side.perf["mean_tokens_per_second"] == 1000.5
    assert [s for s, _ in side.series["loss"]] == [0, 1]
    assert "mean_train_tokens_per_s" not in side.perf  # no row reports it
    side = load_run(make_run(tmp_path / "b", rows=[row(0, train_tokens_per_s=100.0, mfu=0.25),
                                                   row(1, train_tokens_per_s=300.0)]), "b")
    assert side.perf["mean_train_tokens_per_s"] == 200.0 and side.perf["mean_mfu"] == 0.25


def test_load_run_accepts_the_metrics_file_itself(tmp_path, make_run):
    run = make_run(tmp_path / "a", 3)
    assert load_run(run / "metrics.jsonl").steps == 3


def test_winner_directions():
    assert winner("loss", 0.1, 0.2) == ""  # loss has no better side
    assert winner("correct_rate", 0.1, 0.2) == ">"
    assert winner("mean_step_time_s", 1.0, 2.0) == "<"
    assert winner("mean_tokens_per_second", 1.0, 2.0) == ">"
    assert winner("mean_train_tokens_per_s", 3.0, 2.0) == "<" and winner("mean_mfu", 0.1, 0.2) == ">"
    assert winner("correct_rate", 0.1, 0.1 + 1e-12) == "="
    assert winner("loss", None, 0.1) == ""


def test_average_over_seeds_handles_ragged_curves(tmp_path, make_run, row):
    a = load_run(make_run(tmp_path / "s1", rows=[row(0, correct_rate=0.2), row(1, correct_rate=0.4)]))
    b = load_run(make_run(tmp_path / "s2", rows=[row(0, correct_rate=0.4), row(1, correct_rate=0.6), row(2, correct_rate=0.8)]))
    mean = average("cond", [a, b])
    assert mean.curve == pytest.approx([0.3, 0.5, 0.8])
    assert mean.final["correct_rate"] == pytest.approx(0.6)
    assert mean.steps == 2 and mean.runs == 2 and mean.wall_time_s == 5.0
    assert [s for s, _ in mean.series["loss"]] == [0, 1, 2]


def test_campaign_conditions(tmp_path, make_campaign):
    campaign = make_campaign(tmp_path, "campaign_c", ["grpo+none", "maxrl+gtpo"], [1, 2],
                             runs={("grpo+none", 1): {"steps": 4}, ("grpo+none", 2): {"steps": 6},
                                   ("maxrl+gtpo", 1): {"steps": 3}})
    side = load_condition(campaign, "grpo+none")
    assert side.runs == 2 and side.steps == 5
    assert load_condition(campaign, "maxrl+gtpo").runs == 1


def test_unknown_condition_lists_the_known_ones(tmp_path, make_campaign):
    from retrain.errors import UserError

    campaign = make_campaign(tmp_path, "campaign_c", ["grpo+none"], [1], runs={("grpo+none", 1): {"steps": 2}})
    with pytest.raises(UserError) as err:
        load_condition(campaign, "nope")
    assert "grpo+none" in err.value.hint


def test_sparkline_buckets_and_shared_scale():
    assert buckets([1.0, 2.0, 3.0, 4.0], 2) == [1.5, 3.5]
    assert len(buckets(list(range(100)), 20)) == 20
    assert sparkline([0.0, 0.5, 1.0], 0.0, 1.0) == " ▄█"
    assert sparkline([0.5, 0.5], 0.5, 0.5) == "  "
    assert sparkline([0.0, 1.0], 0.0, 2.0) == " ▄"


def test_render_marks_winners_and_draws_curves(tmp_path, make_run, row):
    a = load_run(make_run(tmp_path / "a", rows=[row(i, correct_rate=0.1 * i, loss=1.0) for i in range(5)]), "A-run")
    b = load_run(make_run(tmp_path / "b", rows=[row(i, correct_rate=0.05 * i, loss=0.5) for i in range(5)]), "B-run")
    result = compare(a, b)
    assert "loss" not in result["winners"] and result["winners"]["correct_rate"] == "<"
    text = render(result)
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ") and line.strip()}
    assert lines["loss"].rstrip().endswith("0.5") and lines["correct_rate"].rstrip().endswith("A")
    assert "A:" in text and "Performance:" in text and "█" in text


def test_held_out_metrics_join_the_finals(tmp_path, make_run, evaluation):
    a = load_run(make_run(tmp_path / "a", 3, evals=[evaluation(0, 0.2), evaluation(3, 0.5)]))
    b = load_run(make_run(tmp_path / "b", 3, evals=[evaluation(3, 0.7, k=8)]))
    c = load_run(make_run(tmp_path / "c", 3))
    assert a.final["eval/pass@1"] == 0.5 and a.final["eval/pass@4"] == 1.0
    assert [s for s, _ in a.series["eval/pass@1"]] == [0, 3]
    result = compare(a, b)
    assert result["winners"]["eval/pass@1"] == ">"
    assert result["final_a"]["eval/pass@8"] is None and result["winners"]["eval/pass@8"] == ""
    text = render(result)
    assert "eval/pass@1" in text and "eval/pass@8" in text
    assert "eval/pass@1" not in c.final and "eval/pass@1" not in compare(c, c)["final_a"]
    mean = average("cond", [a, b])
    assert mean.final["eval/pass@1"] == pytest.approx(0.6) and mean.final["eval/pass@8"] == 1.0
