"""A run owns its adapter folder: a second run given one (another log_dir, the same
adapter_path) is refused by name before it writes anything, so it cannot overwrite the first
run's checkpoints (the first run then resumes from its own weights); an unset adapter_path is
`<log_dir>/adapters`, one per run; two runs that claim one folder at the same moment: one is
refused."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import msgspec
import pytest
from fault_run import meta, signalling_run
from tiny_run import Messages, retrain

from retrain.config.schema import TrainConfig
from retrain.io.layout import ADAPTER_OWNER
from retrain.training.interrupt import RunInterrupted
from retrain.training.rundir import RunDirError, claim_adapters
from retrain.training.state import TrainerState, write_state
from retrain.training.trainers import train
from retrain.validation.load import load_config


def config_for(log_dir: Path, adapters: Path | None) -> TrainConfig:
    c = TrainConfig()
    return msgspec.structs.replace(c, logging=msgspec.structs.replace(c.logging, log_dir=str(log_dir)),
                                   backend=msgspec.structs.replace(c.backend, adapter_path=str(adapters or "")))


def holding_a_run(log_dir: Path) -> Path:
    write_state(log_dir, TrainerState(step=1))
    return log_dir


def test_an_unset_adapter_path_is_the_runs_own_folder(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[model]\nmodel = 'tiny'\n[backend]\ndevices = 'cpu'\n[logging]\nlog_dir = '{tmp_path / 'a'}'\n")
    assert load_config(cfg).config.backend.adapter_path == str(tmp_path / "a" / "adapters")
    other = load_config(cfg, ["--log-dir", str(tmp_path / "b")]).config
    assert other.backend.adapter_path == str(tmp_path / "b" / "adapters")
    explicit = load_config(cfg, ["--adapter-path", str(tmp_path / "mine")]).config  # a user's path is kept
    assert explicit.backend.adapter_path == str(tmp_path / "mine")


def test_the_owner_is_recorded_and_another_run_is_refused_by_name(tmp_path: Path) -> None:
    shared = tmp_path / "adapters"
    first = holding_a_run(tmp_path / "first")
    assert claim_adapters(config_for(first, shared), None) == ""
    assert '"log_dir": "' + str(first.resolve()) in (shared / ADAPTER_OWNER).read_text()
    assert claim_adapters(config_for(first, shared), first) == ""  # the owner resuming
    with pytest.raises(RunDirError) as refused:
        claim_adapters(config_for(tmp_path / "second", shared), None)
    assert f"adapter_path {shared} belongs to the run in {first.resolve()}" in str(refused.value)
    assert f"--resume {first.resolve()}" in refused.value.hint and "leave it unset" in refused.value.hint
    with pytest.raises(RunDirError):  # a resume of another run into the folder too
        claim_adapters(config_for(holding_a_run(tmp_path / "third"), shared), tmp_path / "third")


def test_a_resume_into_another_log_dir_takes_the_folder_with_it(tmp_path: Path) -> None:
    shared = tmp_path / "adapters"
    first = holding_a_run(tmp_path / "first")
    claim_adapters(config_for(first, shared), None)
    note = claim_adapters(config_for(tmp_path / "moved", shared), first)
    assert "now belongs to this run's log directory" in note
    assert str((tmp_path / "moved").resolve()) in (shared / ADAPTER_OWNER).read_text()


def test_an_owner_whose_log_dir_is_gone_hands_the_folder_over(tmp_path: Path) -> None:
    shared = tmp_path / "adapters"
    claim_adapters(config_for(tmp_path / "deleted", shared), None)  # its log_dir is not there
    note = claim_adapters(config_for(tmp_path / "new", shared), None)
    assert note == f"{shared} was owned by {(tmp_path / 'deleted').resolve()}, which is gone; this run takes it over"


def test_an_owner_still_loading_its_model_keeps_the_folder(tmp_path: Path) -> None:
    """Its log directory exists, nothing trained yet: another run is refused all the same."""
    shared, loading = tmp_path / "adapters", tmp_path / "loading"
    loading.mkdir()
    claim_adapters(config_for(loading, shared), None)
    with pytest.raises(RunDirError):
        claim_adapters(config_for(tmp_path / "new", shared), None)


def test_checkpoints_with_no_owner_are_refused_to_a_new_run_and_adopted_by_a_resume(tmp_path: Path) -> None:
    shared = tmp_path / "adapters"
    (shared / "checkpoint_step_4").mkdir(parents=True)  # left by a run before owners were recorded
    with pytest.raises(RunDirError) as refused:
        claim_adapters(config_for(tmp_path / "new", shared), None)
    assert "holds checkpoints of another run (checkpoint_step_4) and no record of which" in str(refused.value)
    old = holding_a_run(tmp_path / "old")
    assert claim_adapters(config_for(old, shared), old) == ""
    assert str(old.resolve()) in (shared / ADAPTER_OWNER).read_text()


def test_a_follower_rank_checks_and_writes_nothing(tmp_path: Path) -> None:
    claim_adapters(config_for(tmp_path / "run", tmp_path / "adapters"), None, write=False)
    assert not (tmp_path / "adapters").exists()


def _claim(log_dir: str, adapters: str, start: Any, results: Any) -> None:
    Path(log_dir).mkdir()  # a run's log directory exists before it claims (RunLog makes it)
    start.wait()
    try:
        claim_adapters(config_for(Path(log_dir), Path(adapters)), None)
        results.put("claimed")
    except RunDirError as exc:
        results.put(str(exc))


def test_of_runs_that_claim_one_folder_at_once_one_wins(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(4), context.Queue()
    procs = [context.Process(target=_claim, args=(str(tmp_path / f"run{i}"), str(tmp_path / "adapters"), start,
                                                  results)) for i in range(4)]
    for proc in procs:
        proc.start()
    try:
        got = [results.get(timeout=60) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=30)
    assert got.count("claimed") == 1, got
    assert not [p for p in (tmp_path / "adapters").iterdir() if p.name != ADAPTER_OWNER]  # no temp file left


def test_a_second_run_with_the_first_runs_adapter_path_is_refused_and_the_first_resumes_unharmed(
        in_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's case: the first run stopped after step 1 with checkpoints 1 and 2; a second
    run with another log_dir and the first's adapter_path is refused (status 2, one line naming
    the owner) before it writes a byte, and the first resumes from its own weights."""
    monkeypatch.setenv("SIGNAL_NAME", "SIGINT")
    monkeypatch.setenv("SIGNAL_AT_CALLS", "13")  # in step 1
    first = signalling_run(in_root, "first")
    with pytest.raises(RunInterrupted):
        train(load_config(first, [], import_plugins=False).config, Messages())
    monkeypatch.delenv("SIGNAL_AT_CALLS")
    adapters = in_root / "first" / "adapters"
    before = {p.relative_to(adapters): p.read_bytes() for p in adapters.rglob("*") if p.is_file()}
    second = signalling_run(in_root, "second")
    second.write_text(second.read_text().replace(str(in_root / "second" / "adapters"), str(adapters)))
    refused = retrain(second)
    assert refused.returncode == 2, refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert lines == [f"error: [backend] adapter_path {adapters} belongs to the run in {(in_root / 'first' / 'logs')} "
                     f"({ADAPTER_OWNER}); a second run there would overwrite its checkpoints"], refused.stderr
    assert not (in_root / "second" / "logs" / "metrics.jsonl").exists()
    after = {p.relative_to(adapters): p.read_bytes() for p in adapters.rglob("*") if p.is_file()}
    assert after == before
    resumed = retrain(first, "--resume", str(in_root / "first" / "logs"))
    assert resumed.returncode == 0, resumed.stderr
    assert meta(in_root / "first" / "logs")["status"] == "succeeded"
