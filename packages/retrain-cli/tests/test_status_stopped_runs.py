"""`retrain status` on runs that stopped themselves: an interrupted run (Ctrl-C, saved) is its
own resumable state, and a failed run says why (the failure and its message)."""

from __future__ import annotations

from pathlib import Path


def test_an_interrupted_run_is_its_own_state(cli, make_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_run(tmp_path / "logs" / "cut", steps=3, meta={"status": "interrupted", "max_steps": 10,
                                                       "error_message": "interrupted after step 2; checkpoint saved"})
    res = cli("status", "logs")
    assert res.code == 0 and "[interrupted]" in res.stdout and "1 interrupted" in res.stdout, res.stdout


def test_a_failed_run_says_why(cli, make_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_run(tmp_path / "logs" / "bad", steps=3, meta={
        "status": "failed", "max_steps": 10, "failure_status": "exception:RewardErrorBudget",
        "error_message": "the reward failed on 8 of 8 completions for 3 steps in a row: ZeroDivisionError"})
    res = cli("status", "logs")
    assert "exception:RewardErrorBudget the reward failed on 8 of 8 completions" in res.stdout, res.stdout
