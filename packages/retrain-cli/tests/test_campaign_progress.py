"""What a campaign shows while it runs: the live table on a terminal and the plain lines
elsewhere (runs done / running / failed, each run's step and current reward)."""

from __future__ import annotations

import io

from rich.console import Console

from retrain.campaign.progress import LiveView, PlainView, make_view


def test_live_table_counts_runs_and_shows_each_reward() -> None:
    view = LiveView()
    view.begin(["a_s1", "a_s2", "b_s1"], done=["a_s1"])
    view.started("a_s2", 1)
    view.step("a_s2", 2, 4, 0.625)
    view.started("b_s1", 2)
    view.ended("b_s1", "failed", "exception:RuntimeError: boom")
    out = Console(file=io.StringIO(), width=120, record=True)
    out.print(view._table())
    text = out.export_text()
    view.close()
    assert "campaign: 1/3 done, 1 running, 1 failed, 0 pending" in text
    cells = [[c.strip() for c in line.strip().strip("│┃").replace("┃", "│").split("│")]
             for line in text.splitlines() if line.startswith(("│", "┃"))]
    rows = {c[0]: c[1:] for c in cells}
    assert rows["run"] == ["state", "step", "reward", "time"]
    assert rows["a_s1"][:3] == ["finished", "-", "-"]
    assert rows["a_s2"][:3] == ["running", "3/4", "0.625"]
    assert rows["b_s1"][0] == "failed"


def test_plain_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    view = make_view(stream)
    assert isinstance(view, PlainView) and not isinstance(view, LiveView)
    view.begin(["a_s1", "a_s2"], done=["a_s1"])
    view.started("a_s2", 2)
    view.step("a_s2", 3, 4, 0.5)
    view.ended("a_s2", "finished")
    view.close()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "1 of 2 runs already finished; running the other 1"
    assert lines[1] == "[2/2] a_s2 started (attempt 2)"
    assert lines[2].startswith("a_s2 finished in ") and lines[2].endswith(", reward 0.500")
    assert lines[3] == "campaign: 2/2 done, 0 running, 0 failed, 0 pending"
