import json
import sys

from typer.testing import CliRunner

from retrain.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), prog_name="retrain")


def test_diff_two_runs_json(tmp_path, make_run, row):
    a = make_run(tmp_path / "a", rows=[row(i, correct_rate=0.2) for i in range(3)])
    b = make_run(tmp_path / "b", rows=[row(i, correct_rate=0.1) for i in range(4)])
    result = invoke("diff", str(a), str(b), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"label_a", "label_b", "final_a", "final_b", "perf_a", "perf_b", "wall_time_a", "wall_time_b",
            "steps_a", "steps_b", "curve_a", "curve_b", "winners"} <= set(data)
    assert data["steps_a"] == 3 and data["steps_b"] == 4 and data["winners"]["correct_rate"] == "<"


def test_diff_campaign_conditions_text(tmp_path, make_campaign):
    campaign = make_campaign(tmp_path, "campaign_d", ["grpo+none", "maxrl+gtpo"], [1, 2],
                             runs={("grpo+none", 1): {"steps": 4}, ("grpo+none", 2): {"steps": 4},
                                   ("maxrl+gtpo", 2): {"steps": 8}})
    result = invoke("diff", str(campaign), "grpo+none", "maxrl+gtpo")
    assert result.exit_code == 0, result.output
    assert "A: grpo+none (2 runs)" in result.stdout and "B: maxrl+gtpo" in result.stdout


def test_diff_errors_exit_2(tmp_path, make_run):
    run = make_run(tmp_path / "a", 2)
    assert invoke("diff", str(run)).exit_code == 2
    missing = invoke("diff", str(run), str(tmp_path / "nope"))
    assert missing.exit_code == 2 and "no metrics.jsonl" in missing.stderr
    not_campaign = invoke("diff", str(tmp_path), "x", "y")
    assert not_campaign.exit_code == 2 and "not a campaign" in not_campaign.stderr


def test_diff_plot(tmp_path, make_run, monkeypatch):
    a, b = make_run(tmp_path / "a", 5), make_run(tmp_path / "b", 7)
    out = tmp_path / "diff.png"
    result = invoke("diff", str(a), str(b), "--plot", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    missing = invoke("diff", str(a), str(b), "--plot", str(tmp_path / "y.png"))
    assert missing.exit_code == 2 and "install matplotlib" in missing.stderr


def test_a_distilling_run_shows_its_teacher_kl_and_time_in_status_and_diff(tmp_path, make_run, row):
    rows = [{**row(i), "teacher/kl": 0.5 - 0.1 * i, "teacher/time_s": 0.25} for i in range(3)]
    distilled = make_run(tmp_path / "logs" / "distilled", rows=rows, final=True)
    plain = make_run(tmp_path / "logs" / "plain", rows=[row(i) for i in range(3)], final=True)
    status = invoke("status", str(tmp_path / "logs"))
    assert status.exit_code == 0, status.output
    (line,) = [x for x in status.stdout.splitlines() if "distilled" in x]
    assert "teacher_kl=0.3000" in line and "teacher_t=0.25s" in line
    assert "teacher_kl" not in next(x for x in status.stdout.splitlines() if "plain" in x)
    data = json.loads(invoke("status", str(tmp_path / "logs"), "--json").stdout)
    (summary,) = [r for r in data["runs"] if r["path"].endswith("distilled")]
    assert summary["teacher_kl"] == 0.3 and summary["teacher_time_s"] == 0.25
    diff = json.loads(invoke("diff", str(distilled), str(plain), "--json").stdout)
    assert diff["final_a"]["teacher/kl"] == 0.3 and diff["final_b"]["teacher/kl"] is None
    assert diff["perf_a"]["mean_teacher/time_s"] == 0.25 and "mean_teacher/time_s" not in diff["perf_b"]
    text = invoke("diff", str(distilled), str(plain)).stdout
    assert "teacher/kl" in text and "mean_teacher/time_s" in text
