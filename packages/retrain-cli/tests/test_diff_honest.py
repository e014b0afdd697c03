"""Honest comparisons: winners only where a metric has a direction, warmup (SFT) rows counted
apart from RL steps, zero drawn empty, warmup loss on its own plot panel, and campaign
matrices of final rewards (held-out pass@1 when runs evaluate) with mean ± std over seeds."""

import json

import pytest
from typer.testing import CliRunner

from retrain.cli import app
from retrain.diff.compute import compare, direction, load_run, winner
from retrain.diff.format import render, sparkline
from retrain.status.format import campaign_block
from retrain.status.plot import SFT_LOSS, panels, run_curves
from retrain.status.scan import scan_all

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), prog_name="retrain")


def sft_row(step, loss=2.0):
    """A warmup row as training/sft writes it: phase "sft", its own step counter."""
    return {"step": step, "phase": "sft", "loss": loss, "lr": 1e-4, "datums": 4, "supervised_tokens": 64,
            "step_time_s": 1.0, "train_time_s": 1.0, "tokens_per_second": 64.0}


def warm_run(make_run, row, path, warmup=5, steps=12):
    rows = [sft_row(i, loss=2.0 - 0.1 * i) for i in range(warmup)] + [row(i) for i in range(steps)]
    return make_run(path, rows=rows, final=True)


def test_winners_only_on_metrics_with_a_direction(tmp_path, make_run, row):
    a = load_run(make_run(tmp_path / "a", rows=[row(i, loss=1.0, sample_share=0.9, sample_time_s=3.0,
                                                   correct_rate=0.5) for i in range(3)]))
    b = load_run(make_run(tmp_path / "b", rows=[row(i, loss=0.5, sample_share=0.2, sample_time_s=1.0,
                                                   correct_rate=0.2, step_time_s=1.0) for i in range(3)]))
    result = compare(a, b)
    winners = result["winners"]
    for undirected in ("loss", "mean_sample_share", "mean_train_share", "mean_sample_time_s", "mean_train_time_s"):
        assert undirected not in winners, undirected
        assert direction(undirected) is None and winner(undirected, 1.0, 2.0) == ""
    assert winners["correct_rate"] == "<" and winners["mean_step_time_s"] == ">"
    assert winners["mean_reward"] == "=" and winners["mean_tokens_per_second"] == "="
    assert winners["peak_process_max_rss_mb"] == "="
    assert direction("eval/pass@8") == 1 and direction("eval/maj@8") == 1 and direction("eval/mean_reward") == 1
    text = render(result)
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("  ") and line.strip()}
    assert rows["loss"][-1] != "B" and rows["loss"][-2:] == ["1", "0.5"]
    assert rows["mean_sample_share"][-2:] == ["90.0%", "20.0%"]
    assert rows["correct_rate"][-1] == "A" and rows["mean_step_time_s"][-1] == "B"


def test_warmup_rows_are_their_own_series_and_count(tmp_path, make_run, row):
    a = load_run(warm_run(make_run, row, tmp_path / "a"))
    b = load_run(make_run(tmp_path / "b", rows=[row(i) for i in range(11)]))
    assert (a.steps, a.sft_steps) == (12, 5) and (b.steps, b.sft_steps) == (11, 0)
    assert [s for s, _ in a.series["loss"]] == list(range(12))
    assert [s for s, _ in a.series[SFT_LOSS]] == list(range(5))
    assert len(a.curve) == 12 and a.final["sft_loss"] == pytest.approx(1.6)
    result = compare(a, b)
    assert (result["steps_a"], result["steps_b"], result["sft_steps_a"], result["sft_steps_b"]) == (12, 11, 5, 0)
    text = render(result)
    assert "RL steps" in text and "SFT steps" in text
    rl = next(line for line in text.splitlines() if line.strip().startswith("RL steps"))
    assert rl.split()[-2:] == ["12", "11"]
    status = invoke("status", str(tmp_path))
    assert "step=12/12" in status.stdout  # diff counts RL steps the way status does


def test_zero_draws_empty():
    assert sparkline([0.0, 0.0, 0.0], 0.0, 0.0) == "   "
    assert sparkline([0.0, 1.0], 0.0, 1.0) == " █"


def test_diff_of_runs_that_never_score_draws_no_blocks(tmp_path, make_run, row):
    a = load_run(make_run(tmp_path / "a", rows=[row(i, correct_rate=0.0) for i in range(4)]))
    b = load_run(make_run(tmp_path / "b", rows=[row(i, correct_rate=0.0) for i in range(4)]))
    text = render(compare(a, b))
    spark = [line for line in text.splitlines() if line.startswith(("  A ", "  B "))]
    assert len(spark) == 2 and all(line[4:].strip() == "" for line in spark), spark


def test_status_plot_gives_warmup_its_own_panel_and_prints_its_path(tmp_path, make_run, row):
    run = warm_run(make_run, row, tmp_path / "logs" / "warm")
    curves = run_curves(run, "warm")
    assert [s for s, _ in curves.series["loss"]] == list(range(12))  # no fold back to step 0
    assert [s for s, _ in curves.series[SFT_LOSS]] == list(range(5))
    assert SFT_LOSS in [name for name, _ in panels([curves])]
    plain = run_curves(make_run(tmp_path / "plain", 3), "plain")
    assert SFT_LOSS not in [name for name, _ in panels([plain])]
    pytest.importorskip("matplotlib")
    out = tmp_path / "curves.png"
    result = invoke("status", str(tmp_path / "logs"), "--plot", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(out.resolve()) in result.stdout
    as_json = invoke("status", str(tmp_path / "logs"), "--plot", str(out), "--json")
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["runs"]
    assert str(out.resolve()) in as_json.stderr


def test_diff_plot_prints_its_path(tmp_path, make_run, row):
    pytest.importorskip("matplotlib")
    a, b = warm_run(make_run, row, tmp_path / "a"), make_run(tmp_path / "b", 4)
    out = tmp_path / "d.png"
    result = invoke("diff", str(a), str(b), "--plot", str(out))
    assert result.exit_code == 0, result.output
    assert out.is_file() and str(out.resolve()) in result.stdout


def test_campaign_matrix_shows_final_rewards_and_mean_std_over_seeds(tmp_path, make_campaign, row):
    make_campaign(tmp_path, "campaign_r", ["grpo+none", "maxrl+gtpo"], [1, 2], max_steps=3,
                  runs={("grpo+none", 1): {"rows": [row(i, mean_reward=0.2 * (i + 1)) for i in range(3)], "final": True},
                        ("grpo+none", 2): {"rows": [row(i, mean_reward=0.4 * (i + 1)) for i in range(3)], "final": True},
                        ("maxrl+gtpo", 1): {"rows": [row(0, mean_reward=0.5)]}})
    [c] = scan_all(tmp_path).campaigns
    assert c.matrix_metric == "mean_reward"
    assert c.matrix["grpo+none"] == {"1": pytest.approx(0.6), "2": pytest.approx(1.2)}
    text = "\n".join(campaign_block(c, c.last_activity or 0.0))
    grpo = next(line for line in text.splitlines() if line.strip().startswith("grpo+none"))
    assert "0.600 ✓" in grpo and "1.200 ✓" in grpo and "0.900 ± 0.424" in grpo
    maxrl = next(line for line in text.splitlines() if line.strip().startswith("maxrl+gtpo"))
    assert "0.500 1/3" in maxrl and "—" in maxrl  # a running cell: its reward so far and progress
    assert "final reward" in text and "mean ± std" in text
    assert " 3 ✓" not in text  # cells are rewards, not step counts


def test_campaign_matrix_prefers_held_out_pass_at_1(tmp_path, make_campaign, evaluation):
    make_campaign(tmp_path, "campaign_e", ["a+b"], [1, 2], max_steps=3,
                  runs={("a+b", 1): {"steps": 3, "final": True, "evals": [evaluation(3, 0.25)]},
                        ("a+b", 2): {"steps": 3, "final": True, "evals": [evaluation(3, 0.75)]}})
    [c] = scan_all(tmp_path).campaigns
    assert c.matrix_metric == "eval/pass@1" and c.matrix["a+b"] == {"1": 0.25, "2": 0.75}
    text = "\n".join(campaign_block(c, 0.0))
    assert "held-out pass@1" in text and "0.500 ± 0.354" in text
