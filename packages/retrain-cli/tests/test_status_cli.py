import json
import sys

import pytest
from typer.testing import CliRunner

from retrain.cli import app
from retrain.commands.status.run import watch
from retrain.status.plot import PLOT_HINT

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), prog_name="retrain")


def test_status_text_shows_campaign_matrix_and_standalone_runs(log_tree):
    result = invoke("status", str(log_tree))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith("Campaigns: 1 running  |  Runs: ")
    assert "campaign_20260101_000000  [running, 1 failed]" in out
    assert "0.190 ✓" in out and "0.150 6/10" in out and "0.110 ✗" in out and "—" in out
    assert "Standalone runs:" in out
    for state in ("[running]", "[finished]", "[dead]", "[stale]"):
        assert state in out
    assert "pid=" in out and "(gone)" in out
    done = next(line for line in out.splitlines() if "/done " in line)
    assert "pass@1=0.600@4" in done  # the latest held-out evaluation, after 4 RL steps
    live = next(line for line in out.splitlines() if "/live " in line)
    assert "pass@1=-" in live


def test_status_json_lists_runs_and_campaigns(log_tree):
    result = invoke("status", str(log_tree), "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["root"] == str(log_tree)
    states = {r["run"]: r["state"] for r in data["runs"]}
    assert states == {"live": "running", "done": "finished", "crashed": "dead", "sleepy": "stale",
                      "empty": "running", "nested/torn": "running"}
    [campaign] = data["campaigns"]
    assert campaign["failed"] == 1 and campaign["completed"] == 1 and campaign["status"] == "running"
    assert campaign["matrix"]["maxrl+gtpo"] == {"42": 0.11, "101": None}
    done = next(r for r in data["runs"] if r["run"] == "done")
    assert (done["eval_pass_at_1"], done["eval_step"], done["eval_k"]) == (0.6, 4, 4)


def test_status_hides_idle_campaigns_unless_all(tmp_path, make_campaign):
    make_campaign(tmp_path, "campaign_old", ["a+b"], [1], runs={("a+b", 1): {"steps": 2, "final": True, "age_s": 2 * 86400}})
    default = invoke("status", str(tmp_path))
    assert "campaign_old" not in default.stdout and "1 idle campaign hidden" in default.stdout
    assert "campaign_old" in invoke("status", str(tmp_path), "--all").stdout
    assert "campaign_old" not in invoke("status", str(tmp_path), "--all", "--active").stdout


def test_status_missing_root_exits_2(tmp_path):
    result = invoke("status", str(tmp_path / "nope"))
    assert result.exit_code == 2
    assert "No log directory found" in result.stderr


def test_status_empty_root(tmp_path):
    result = invoke("status", str(tmp_path))
    assert result.exit_code == 0
    assert "Campaigns: 0 campaigns  |  Runs: 0 runs" in result.stdout and "No runs under" in result.stdout


def test_status_help_and_unknown_flags():
    result = invoke("status", "--help")
    assert result.exit_code == 0 and result.stdout.startswith("Usage: retrain status [OPTIONS] [LOGDIR]")
    assert "--watch" in result.stdout and "status serve" in result.stdout
    assert invoke("status", "--bogus").exit_code == 2


def test_status_serve_help_is_reachable():
    result = invoke("status", "serve", "--help")
    assert result.exit_code == 0 and "/metrics" in result.stdout


def test_watch_repeats_clears_and_stops_on_ctrl_c(capsys):
    calls = []

    def show():
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return f"frame {len(calls)}"

    watch(show, interval=5, clear=True, sleep=lambda s: None)
    out = capsys.readouterr().out
    assert len(calls) == 3 and out.count("\x1b[2J\x1b[H") == 2 and "frame 2" in out


def test_watch_json_mode_does_not_clear(capsys):
    watch(lambda: "{}", interval=1, clear=False, cycles=2, sleep=lambda s: None)
    assert capsys.readouterr().out == "{}\n{}\n"


def test_top_is_watch_active(monkeypatch, log_tree):
    seen = {}

    def fake_watch(show, *, interval, clear):
        seen.update(text=show(), interval=interval, clear=clear)

    monkeypatch.setattr("retrain.commands.status.run.watch", fake_watch)
    result = invoke("top", str(log_tree), "--interval", "2")
    assert result.exit_code == 0, result.output
    assert seen["interval"] == 2 and seen["clear"] and seen["text"].startswith("Campaigns:")


def test_status_plot_writes_a_png(log_tree, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "curves.png"
    result = invoke("status", str(log_tree), "--plot", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_plot_without_matplotlib_says_how_to_install(log_tree, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = invoke("status", str(log_tree), "--plot", str(tmp_path / "x.png"))
    assert result.exit_code == 2
    assert PLOT_HINT in result.stderr and "pip install 'retrain-cli[plot]'" in result.stderr
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("args", [["--help"], ["status", "{root}", "--json"], ["top", "--help"],
                                  ["diff", "{root}/done", "{root}/live", "--json"],
                                  ["status", "serve", "--help"]])
def test_status_commands_import_no_ml_package(log_tree, args):
    import subprocess

    code = ("import sys\nfrom retrain.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "heavy = ('torch', 'transformers', 'matplotlib', 'wandb', 'prometheus_client')\n"
            "if sys.argv[1:] == ['--help']:\n    heavy += ('retrain.status.scan', 'retrain.diff.compute')\n"
            "print(sorted(m for m in heavy if m in sys.modules))")
    argv = [a.format(root=log_tree) for a in args]
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
