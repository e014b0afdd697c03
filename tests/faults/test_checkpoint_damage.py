"""A checkpoint carries each file's size and sha256 (`digests.json`): `resume-check` finds a
truncated `adapter_model.safetensors` or `optimizer.pt`, an empty `rng.pt`, a flipped bit or a
missing file and names it, with the checkpoint a resume falls back to (the newest whole one
before it); the resume says so and ends bit-identical to the uninterrupted run. A checkpoint
written before digests were kept is checked by form (a truncated or empty file); damage no
check sees is named by the file that fails to load."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fault_run import signalling_run
from safetensors.torch import save_file
from tiny_run import Messages, retrain

from retrain.io.log import read_jsonl
from retrain.training.integrity import damage, seal
from retrain.training.interrupt import RunInterrupted
from retrain.training.resume_check import check_resume
from retrain.training.trainers import train
from retrain.validation.load import load_config


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def empty(path: Path) -> None:
    path.write_bytes(b"")


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


DAMAGE: dict[str, tuple[str, Callable[[Path], None]]] = {
    "truncated weights": ("adapter_model.safetensors", truncate),
    "truncated optimizer": ("optimizer.pt", truncate),
    "empty rng": ("rng.pt", empty),
    "a flipped bit": ("optimizer.pt", flip),
    "a missing file": ("checkpoint.json", lambda p: p.unlink()),
}


def checkpoint_like(folder: Path) -> Path:
    """A folder with the local backend's kinds of files, written by the libraries that write them."""
    folder.mkdir(parents=True)
    save_file({"w": torch.arange(64, dtype=torch.float32)}, str(folder / "adapter_model.safetensors"))
    torch.save({"state": {0: {"exp_avg": torch.ones(32)}}}, folder / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state()}, folder / "rng.pt")
    (folder / "checkpoint.json").write_text(json.dumps({"lora": True}))
    return folder


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_digests_name_the_damaged_file(tmp_path: Path, case: str) -> None:
    folder = checkpoint_like(tmp_path / "ck")
    seal(folder)
    assert damage(folder) == []
    name, hurt = DAMAGE[case]
    hurt(folder / name)
    (found,) = damage(folder)
    assert found.startswith(f"{name}: "), found


@pytest.mark.parametrize("case", ["truncated weights", "truncated optimizer", "empty rng"])
def test_a_checkpoint_without_digests_is_checked_by_form(tmp_path: Path, case: str) -> None:
    folder = checkpoint_like(tmp_path / "ck")
    assert damage(folder) == []
    name, hurt = DAMAGE[case]
    hurt(folder / name)
    (found,) = damage(folder)
    assert found.startswith(f"{name}: "), found


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A run of 4 steps stopped (Ctrl-C) after step 2, a checkpoint after every step: the
    newest is checkpoint_step_3; the tests damage it and put it back."""
    root = tmp_path_factory.mktemp("stopped")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.syspath_prepend(str(root))
        mp.setenv("SIGNAL_NAME", "SIGINT")
        mp.setenv("SIGNAL_AT_CALLS", "20")  # in step 2
        with pytest.raises(RunInterrupted):
            train(load_config(signalling_run(root), [], import_plugins=False).config, Messages())
    yield root


def resume_check(log_dir: Path) -> tuple[int, dict[str, Any]]:
    """What `retrain resume-check LOGDIR --json` reports (its exit status: 0 when ok)."""
    result = check_resume(log_dir)
    return (0 if result.ok else 1), result.to_dict()


@pytest.mark.parametrize("case", ["truncated weights", "truncated optimizer", "empty rng"])
def test_resume_check_names_the_file_and_the_checkpoint_a_resume_falls_back_to(stopped: Path, case: str) -> None:
    logs, newest = stopped / "run" / "logs", stopped / "run" / "adapters" / "checkpoint_step_3"
    code, report = resume_check(logs)
    assert code == 0 and report["digests"] == "verified" and report["next_step"] == 3, report
    name, hurt = DAMAGE[case]
    kept = (newest / name).read_bytes()
    hurt(newest / name)
    try:
        code, report = resume_check(logs)
    finally:
        (newest / name).write_bytes(kept)
    assert code == 0, report  # resumable: from the checkpoint before
    (issue,) = [i for i in report["issues"] if i["code"] == "checkpoint_damaged"]
    assert issue["severity"] == "warning"
    assert issue["message"].startswith(f"checkpoint {newest} is damaged: {name}: "), issue
    assert "a resume falls back to checkpoint_step_2" in issue["message"]
    assert report["fallback_checkpoint"] == str(newest.parent / "checkpoint_step_2")
    assert report["next_step"] == 2


def test_with_no_whole_checkpoint_left_resume_check_says_not_resumable(stopped: Path) -> None:
    adapters = stopped / "run" / "adapters"
    kept = {p: p.read_bytes() for p in adapters.glob("checkpoint_step_*/rng.pt")}
    try:
        for path in kept:
            empty(path)
        code, report = resume_check(stopped / "run" / "logs")
    finally:
        for path, data in kept.items():
            path.write_bytes(data)
    assert code == 1 and [i["code"] for i in report["issues"]] == ["checkpoint_damaged"], report
    assert "no earlier checkpoint beside it is whole" in report["issues"][0]["message"]


@pytest.mark.slow
def test_a_damaged_newest_checkpoint_resumes_from_the_one_before_bit_identically(in_root: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's case, end to end: optimizer.pt of the newest checkpoint truncated, the
    resume names it, falls back to the checkpoint before, trains that step again and ends where
    the uninterrupted run does."""
    plain = signalling_run(in_root, "plain")
    train(load_config(plain, [], import_plugins=False).config, Messages())
    monkeypatch.setenv("SIGNAL_NAME", "SIGINT")
    monkeypatch.setenv("SIGNAL_AT_CALLS", "20")  # in step 2
    cut = signalling_run(in_root, "cut")
    with pytest.raises(RunInterrupted):
        train(load_config(cut, [], import_plugins=False).config, Messages())
    monkeypatch.delenv("SIGNAL_AT_CALLS")
    newest = in_root / "cut" / "adapters" / "checkpoint_step_3"
    truncate(newest / "optimizer.pt")
    resumed = retrain(cut, "--resume", str(in_root / "cut" / "logs"))
    assert resumed.returncode == 0, resumed.stderr
    assert (f"checkpoint {newest} is damaged (optimizer.pt: " in resumed.stdout and
            "falling back to checkpoint_step_2, the newest whole one: resuming from" in resumed.stdout), resumed.stdout
    volatile = ("time", "_s", "tokens_per_second", "share", "process_max_rss_mb")

    def steady(log: Path) -> list[dict[str, object]]:
        return [{k: v for k, v in r.items() if not any(t in k for t in volatile)} for r in read_jsonl(log)]

    assert steady(in_root / "cut" / "logs" / "metrics.jsonl") == steady(in_root / "plain" / "logs" / "metrics.jsonl")
    final = "adapters/final/adapter_model.safetensors"
    assert (in_root / "cut" / final).read_bytes() == (in_root / "plain" / final).read_bytes()
