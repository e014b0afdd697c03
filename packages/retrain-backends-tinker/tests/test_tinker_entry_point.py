"""The tinker backend registers its definition (every loss aggregation, a doctor probe); a run
without an API key, or against a service that does not answer, stops at once with one line
that never holds the key."""

from __future__ import annotations

import socket
import time
from importlib import metadata
from pathlib import Path

import msgspec
import pytest

from retrain.backends import catalog
from retrain.backends.errors import BackendUnavailable
from retrain.config.schema import LOSS_AGGREGATIONS, TrainConfig

KEY = "tml-unit-test-key-5b1e"


def test_entry_point_registers_the_definition() -> None:
    (ep,) = [e for e in metadata.entry_points(group="retrain.backends") if e.name == "tinker"]
    definition = ep.load()
    assert isinstance(definition, catalog.BackendDefinition)
    assert definition.distribution == "retrain-backends-tinker"
    entry = catalog.lookup("tinker")
    assert entry is not None and entry.installed and not entry.problems  # contract supported
    assert entry.runnable and entry.definition.probe == "retrain.backends.tinker.doctor:probe"
    assert entry.definition.capabilities.loss_aggregations == LOSS_AGGREGATIONS


def unreachable_config(options: dict[str, object] | None = None) -> TrainConfig:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    c = TrainConfig()
    model = msgspec.structs.replace(c.model, base_url=f"http://127.0.0.1:{port}")
    backend = msgspec.structs.replace(c.backend, backend="tinker", options=dict(options or {}))
    return msgspec.structs.replace(c, model=model, backend=backend)


def test_a_missing_key_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from retrain.backends.tinker.create import create_backend

    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    with pytest.raises(BackendUnavailable, match="needs an API key: set TINKER_API_KEY"):
        create_backend(unreachable_config())


def test_an_unreachable_service_fails_fast_without_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from retrain.backends.tinker.create import create_backend

    monkeypatch.setenv("TINKER_API_KEY", KEY)
    config = unreachable_config({"call_timeout_s": 5})
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailable, match=r"cannot reach the Tinker service at http://127\.0\.0\.1:") as err:
        create_backend(config)
    assert time.monotonic() - t0 < 30 and KEY not in str(err.value) and "\n" not in str(err.value)


def test_doctor_probe_reports_the_sdk_and_the_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    from retrain.backends.tinker.doctor import probe

    monkeypatch.setenv("TINKER_API_KEY", KEY)
    report = probe(unreachable_config(), timeout_s=5)
    assert report["sdk"] == metadata.version("tinker") and report["answers"] is False
    assert "cannot reach" in report["error"] and KEY not in repr(report)
    monkeypatch.delenv("TINKER_API_KEY")
    assert "TINKER_API_KEY" in probe(unreachable_config(), timeout_s=5)["error"]


def test_doctor_probe_asks_from_a_child_and_imports_no_torch() -> None:
    """The SDK (which imports torch) runs in the probe's child process, never in doctor's."""
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    code = ("import sys, msgspec\n"
            "from retrain.config.schema import TrainConfig\n"
            "from retrain.backends.tinker.doctor import probe\n"
            "c = TrainConfig()\n"
            f"m = msgspec.structs.replace(c.model, base_url='http://127.0.0.1:{port}')\n"
            f"b = msgspec.structs.replace(c.backend, backend='tinker', options={{'api_key': '{KEY}'}})\n"
            "r = probe(msgspec.structs.replace(c, model=m, backend=b), timeout_s=5)\n"
            "print(r['answers'], 'cannot reach' in r['error'], 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "True", "False"], out.stdout + out.stderr[-2000:]
    assert KEY not in out.stdout + out.stderr


def test_resume_check_reads_the_service_record_through_the_definition(tmp_path: Path) -> None:
    """A checkpoint folder holding the backend's record (no weights) is checked by the
    backend's own `check_record`, reached from core's resume preflight through the catalog."""
    import json

    from retrain.backends.tinker.record import CHECKPOINT
    from retrain.training.integrity import seal
    from retrain.training.resume_check import check_resume
    from retrain.training.state import TrainerState, write_state

    folder = tmp_path / "adapters" / "checkpoint_step_2"
    folder.mkdir(parents=True)
    write_state(tmp_path, TrainerState(step=1, checkpoint_name="checkpoint_step_2", checkpoint_path=str(folder)))
    (folder / CHECKPOINT).write_text(json.dumps({"state_path": "tinker://run-1/state/2", "base_model": "m",
                                                 "service": "http://127.0.0.1:1"}))
    seal(folder)  # its digests, as the run writes them last
    report = check_resume(tmp_path, max_steps=4).to_dict()
    assert report["ok"] and report["remote_state"] == "tinker://run-1/state/2", report
    assert [i["code"] for i in report["issues"]] == ["remote_checkpoint"] and report["digests"] == "verified"
    (folder / CHECKPOINT).write_text(json.dumps({"state_path": "/not/remote"}))
    seal(folder)
    report = check_resume(tmp_path, max_steps=4).to_dict()
    assert not report["ok"] and "names no tinker:// state" in report["issues"][0]["message"], report
