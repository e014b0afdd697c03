"""Qwen3.5's kernel options (`retrain.models.qwen35`), the other families' refusal of them, and
transformers' kernel fallback lines kept off the terminal (one metric of retrain's instead)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import torch
from tiny_families import write_checkpoint

from retrain.backends.local.backend import LocalBackend
from retrain.errors import UserError
from retrain.models import qwen35
from retrain.models.load import ModelSpec, load_model
from retrain.models.quiet import kernel_fallbacks
from retrain.types import Datum, SamplingParams


@pytest.fixture(scope="module")
def qwen35_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint("qwen3_5 multimodal", tmp_path_factory.mktemp("qwen35"))


def modeling() -> object:
    from transformers.models.qwen3_5 import modeling_qwen3_5

    return modeling_qwen3_5


def test_auto_on_the_cpu_runs_the_torch_reference_and_says_so(tiny_config, qwen35_folder: Path,
                                                               capfd: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    logging.Logger.warning_once.cache_clear()  # type: ignore[attr-defined]  # transformers logs each line once a process
    backend = LocalBackend(tiny_config("--model", str(qwen35_folder)))
    backend.sample([[1, 20, 30, 40]], 2, SamplingParams(max_tokens=4))
    backend.train_step([Datum(tokens=[1, 20, 30, 40, 50], logprobs=[0.0] * 5, advantages=[0, 0, 0, 0, 1.0])], 1e-2, 0.0)
    metrics = backend.runtime_metrics()
    assert metrics["local_qwen35_gated_delta_kernel"] == "torch"
    assert metrics["local_qwen35_gated_delta_chunk_size"] == 64
    assert metrics["local_qwen35_causal_conv1d"] == "torch"
    assert "falling back" not in capfd.readouterr().err


def test_a_chunk_size_reaches_the_torch_rule_and_changes_nothing_but_rounding(qwen35_folder: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_model(ModelSpec(str(qwen35_folder)), seed=0).eval()
    ids = torch.tensor([[1, 20, 30, 40, 50, 60, 70, 80, 90, 21, 22, 23]])
    qwen35.apply_gated_delta(model, qwen35.GatedDeltaChoice("torch", None))
    with torch.no_grad():
        default = model(input_ids=ids).logits
    seen: list[int] = []
    reference = qwen35._INSTALLED[modeling().__name__]["torch_chunk_gated_delta_rule"].__wrapped__

    def spy(*args, chunk_size: int = 64, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(chunk_size)
        return reference(*args, chunk_size=chunk_size, **kwargs)

    spy.__wrapped__ = spy  # type: ignore[attr-defined]
    monkeypatch.setitem(qwen35._INSTALLED[modeling().__name__], "torch_chunk_gated_delta_rule",
                        type("W", (), {"__wrapped__": staticmethod(spy)})())
    metrics = qwen35.apply_gated_delta(model, qwen35.GatedDeltaChoice("torch", 4))
    with torch.no_grad():
        chunked = model(input_ids=ids).logits
    assert seen and set(seen) == {4} and metrics["local_qwen35_gated_delta_chunk_size"] == 4
    assert torch.allclose(chunked, default, atol=1e-5)
    monkeypatch.undo()
    qwen35.apply_gated_delta(model, qwen35.GatedDeltaChoice("transformers", None))
    assert modeling().torch_chunk_gated_delta_rule is qwen35._INSTALLED[modeling().__name__]["torch_chunk_gated_delta_rule"]


@pytest.mark.parametrize("options,message", [
    ({"qwen35_gated_delta_kernel": "flash_qla"}, "flash-qla package is not installed"),
    ({"qwen35_gated_delta_kernel": "off", "qwen35_gated_delta_chunk_size": "32"}, "leaves transformers' choice"),
    ({"qwen35_gated_delta_chunk_size": "zero"}, "must be \"auto\" or a positive number"),
])
def test_what_cannot_run_here_is_refused_by_name(tiny_config, qwen35_folder: Path, options: dict[str, object],
                                                  message: str) -> None:  # type: ignore[no-untyped-def]
    flags = [f for k, v in options.items() for f in ("--backend-opt", f"{k}={str(v).lower()}")]
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        LocalBackend(tiny_config("--model", str(qwen35_folder), *flags))
    assert "[backend.options]" in str(caught.value)


def test_a_qwen35_option_on_another_family_is_refused(tiny_config) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UserError, match=r"applies to Qwen3\.5 models, and this model is a qwen3"):
        LocalBackend(tiny_config("--backend-opt", "qwen35_gated_delta_kernel=torch"))


def test_kernel_fallback_lines_become_one_metric(caplog: pytest.LogCaptureFixture) -> None:
    from retrain.models.quiet import import_model_classes

    import_model_classes()
    log = logging.getLogger("transformers.integrations.hub_kernels")
    with caplog.at_level(logging.WARNING, logger=log.name):
        log.warning("`some_rule` is falling back to its reference PyTorch implementation because `some-kernels` is "
                    "not installed. This is correct but much slower; install `some-kernels` for the optimized kernel.")
        log.warning("another line")
    assert [r.getMessage() for r in caplog.records] == ["another line"]
    assert "some_rule (some-kernels not installed)" in kernel_fallbacks()["local_kernel_fallbacks"]


def test_transformers_own_fallback_lines_are_dropped_and_kept_as_a_metric(qwen35_folder: Path) -> None:
    """With `off`, transformers' own wrappers run and log their fallback line: no handler of
    that logger sees it, and the metric names the functions."""
    model = load_model(ModelSpec(str(qwen35_folder)), seed=0).eval()
    qwen35.apply_gated_delta(model, qwen35.GatedDeltaChoice("transformers", None))
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("transformers.integrations.hub_kernels")
    log.addHandler(handler)
    logging.Logger.warning_once.cache_clear()  # type: ignore[attr-defined]
    try:
        with torch.no_grad():
            model(input_ids=torch.tensor([[1, 20, 30, 40]]))
    finally:
        log.removeHandler(handler)
    assert not [line for line in seen if "falling back" in line]
    named = kernel_fallbacks()["local_kernel_fallbacks"]
    assert "chunk_gated_delta_rule (flash-linear-attention not installed)" in named
    assert "causal_conv1d_fn (causal_conv1d not installed)" in named
