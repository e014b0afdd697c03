"""What a config asks of this machine, said before a run starts (retrain.commands.machine):
a backend that trains on this machine's devices (capability `local_devices`) and a config that
names a GPU this machine does not show get one warning; a remote service never does."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest

from retrain.commands import machine
from retrain.config.schema import TrainConfig


def config(backend: str, devices: str) -> TrainConfig:
    base = TrainConfig()
    return msgspec.structs.replace(base, backend=msgspec.structs.replace(base.backend, backend=backend, devices=devices))


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "gpu_visible", lambda: False)


@pytest.mark.usefixtures("no_gpu")
def test_a_local_backend_asking_for_a_missing_gpu_is_warned_once() -> None:
    warnings = machine.machine_warnings(config("local", "gpu:0"))
    assert len(warnings) == 1 and "devices = 'gpu:0'" in warnings[0] and "retrain init -t cpu" in warnings[0]
    assert machine.machine_warnings(config("unsloth", "gpu:0"))
    assert machine.machine_warnings(config("local", "cpu")) == []


@pytest.mark.usefixtures("no_gpu")
def test_a_remote_service_is_not_warned_about_this_machines_gpus() -> None:
    assert machine.machine_warnings(config("tinker", "gpu:0")) == []


def test_a_visible_gpu_is_not_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "gpu_visible", lambda: True)
    assert machine.machine_warnings(config("local", "gpu:0")) == []


@pytest.mark.usefixtures("no_gpu")
@pytest.mark.parametrize(("local", "warned"), [(True, True), (False, False)])
def test_a_plugin_backend_says_whether_it_trains_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      local: bool, warned: bool) -> None:
    module = f"machine_plugin_{int(local)}"
    (tmp_path / f"{module}.py").write_text(
        "RETRAIN_BACKEND_CAPABILITIES = {'reports_sync_loss': True, 'preserves_token_advantages': False,\n"
        f"  'supports_checkpoint_resume': False, 'resume_runtime_dependent': False, 'local_devices': {local}}}\n"
        "def make(config):\n    raise RuntimeError\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert bool(machine.machine_warnings(config(f"{module}.make", "gpu:0"))) is warned
    finally:
        sys.modules.pop(module, None)
