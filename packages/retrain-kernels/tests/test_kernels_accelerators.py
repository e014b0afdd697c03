"""Path selection, the forced modes, the metrics record, and the option that drives them."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from retrain.kernels import accelerators
from retrain.kernels.accelerators import (
    KernelUnavailableError,
    choose_path,
    kernel_metrics,
    kernel_mode,
    record,
    set_kernel_mode,
)
from retrain.kernels.logprobs import selected_logprobs


@pytest.fixture
def cpu() -> list[torch.Tensor]:
    return [torch.zeros(2, 2)]


def test_auto_takes_torch_on_cpu(cpu, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter is never chosen by `auto`
    assert choose_path(cpu) == "torch"
    assert choose_path(cpu, path="auto") == "torch"


def test_torch_mode_always_takes_torch(cpu):
    with kernel_mode("torch"):
        assert choose_path(cpu) == "torch"
        assert choose_path(cpu, unsupported="anything") == "torch"


def test_forced_triton_refuses_cpu_tensors_without_the_interpreter(cpu, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(KernelUnavailableError, match="CUDA"):
        choose_path(cpu, path="triton")


def test_forced_triton_refuses_an_unsupported_call(cpu, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(KernelUnavailableError, match="float64"):
        choose_path(cpu, path="triton", unsupported="float64")


def test_forced_triton_needs_triton(cpu, monkeypatch):
    monkeypatch.setattr(accelerators, "triton_available", lambda: False)
    with pytest.raises(KernelUnavailableError, match="does not import"):
        choose_path(cpu, path="triton")


def test_modes_are_validated():
    with pytest.raises(ValueError, match="auto, triton, torch"):
        set_kernel_mode("cuda")
    with pytest.raises(ValueError):
        choose_path([], path="fast")


def test_kernel_mode_restores_the_previous_mode():
    set_kernel_mode("torch")
    with kernel_mode("triton"):
        assert accelerators.get_kernel_mode() == "triton"
    assert accelerators.get_kernel_mode() == "torch"


def test_metrics_report_single_mixed_and_no_paths():
    metrics = kernel_metrics()
    assert metrics["kernels/logprob_path"] == "none" and metrics["kernels/lora_path"] == "none"
    assert metrics["kernels/mode"] == "auto"
    assert metrics["kernels/triton_available"] in (0, 1)
    record("logprob", "torch")
    record("logprob", "torch")
    record("lora", "torch")
    record("lora", "peft")
    metrics = kernel_metrics(reset=True)
    assert metrics["kernels/logprob_path"] == "torch"
    assert metrics["kernels/logprob_torch_calls"] == 2
    assert metrics["kernels/lora_path"] == "mixed"
    assert metrics["kernels/lora_peft_calls"] == 1
    assert kernel_metrics()["kernels/logprob_path"] == "none"


def test_selected_logprobs_records_its_path():
    h, w, t = torch.randn(3, 4), torch.randn(5, 4), torch.tensor([0, 1, 2])
    selected_logprobs(h, w, t)
    assert kernel_metrics()["kernels/logprob_torch_calls"] == 1


def test_importing_the_package_imports_neither_torch_nor_triton():
    code = ("import sys, retrain.kernels, retrain.kernels.accelerators; "
            "print('torch' in sys.modules, 'triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
