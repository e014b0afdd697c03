"""The training console: a live rich bar over the step lines on a terminal, the plain step
lines alone anywhere else."""

from __future__ import annotations

import io
import os
import pty
import re

import pytest
from rich.console import Console

from retrain.commands.run.progress import RichReporter, open_reporter
from retrain.training.console import PlainReporter, Reporter

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SUMMARY = {"condition": "maxrl+none", "steps": 4, "elapsed_s": 1.5, "first_reward": 0.1,
           "last_reward": 0.4, "window": 2, "log_dir": "logs/x"}


def drive(r: Reporter, *, first_step: int = 0) -> None:
    r.start({"condition": "maxrl+none", "steps": 4, "warmup": 2})
    for s in range(2):
        r.warmup(s, 2, {"loss": 1.0 / (s + 1)})
    r.message("flow warning [advantages]: [bold]not markup[/bold]")
    for s in range(first_step, 4):
        r.step(s, 4, {"condition": "maxrl+none", "mean_reward": 0.1 * (s + 1), "loss": 0.01,
                      "tokens_per_second": 1234.0, "correct_rate": 0.5, "num_datums": 8, "step_time_s": 0.2})
    r.finish(SUMMARY)


def test_rich_reporter_draws_bars_under_the_plain_lines() -> None:
    out = io.StringIO()
    drive(RichReporter(Console(file=out, force_terminal=True, width=120), every=2))
    text = ANSI.sub("", out.getvalue())
    assert "━" in text
    assert re.search(r"warmup .*2/2 loss 0\.5000", text)
    assert re.search(r"RL .*4/4 reward 0\.400  loss \+0\.0100  1,234 tok/s eta", text)
    # the history above the bar is the plain log's, brackets and all
    for line in ("warmup 1/2 loss=1.0000", "warmup 2/2 loss=0.5000",
                 "flow warning [advantages]: [bold]not markup[/bold]",
                 "step 0 [maxrl+none] loss=0.0100 reward=0.100", "step 2 [maxrl+none]", "step 3 [maxrl+none]",
                 "Training complete: maxrl+none, 4 RL steps in 1.5s", "  log dir: logs/x"):
        assert line in text, line
    assert "step 1 [" not in text


def test_resumed_bar_starts_at_the_resumed_step() -> None:
    out = io.StringIO()
    reporter = RichReporter(Console(file=out, force_terminal=True, width=120))
    drive(reporter, first_step=2)
    rl = next(t for t in reporter.progress.tasks if t.description == "RL")
    assert rl.completed == 4 and rl.total == 4
    assert rl.start_time is not None and rl.finished


def test_plain_lines_off_a_terminal() -> None:
    out = io.StringIO()
    with open_reporter(out) as reporter:
        assert isinstance(reporter, PlainReporter)
        drive(reporter)
    assert "\x1b[" not in out.getvalue() and "━" not in out.getvalue()
    assert out.getvalue().splitlines()[:4] == [
        "retrain: condition=maxrl+none, steps=4, warmup=2", "warmup 1/2 loss=1.0000", "warmup 2/2 loss=0.5000",
        "flow warning [advantages]: [bold]not markup[/bold]"]


def test_a_terminal_gets_the_bar_and_it_stops_on_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    main, child = pty.openpty()
    with open(child, "w", closefd=True) as tty:
        try:
            with open_reporter(tty) as reporter:
                assert isinstance(reporter, RichReporter)
                reporter.start({"steps": 4})
                assert reporter.progress.live.is_started
                raise RuntimeError("boom")
        except RuntimeError:
            pass
        assert not reporter.progress.live.is_started
    os.close(main)
