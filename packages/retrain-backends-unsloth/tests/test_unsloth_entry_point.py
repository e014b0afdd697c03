"""The unsloth backend on a machine without a CUDA GPU: its entry point registers a built
backend, its config maps onto Unsloth's calls as the spec says, what it does not build is
refused at load by name, and a run refuses in one line (exit 2) before loading anything."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from retrain.backends import catalog
from retrain.backends.errors import BackendUnavailable
from retrain.backends.unsloth.plan import DEFAULT_TARGETS, plan
from retrain.config import ConfigError
from retrain.validation.load import load_config


def config(tmp_path: Path, options: str = "", extra: str = ""):  # type: ignore[no-untyped-def]
    p = tmp_path / "c.toml"
    p.write_text(f"[model]\nmodel = 'org/m'\nlora_rank = 16\n[backend]\nbackend = 'unsloth'\ndevices = 'gpu:0'\n"
                 f"[backend.options]\n{options}\n{extra}")
    return load_config(p, import_plugins=False).config


def test_entry_point_registers_a_built_backend() -> None:
    (ep,) = [e for e in metadata.entry_points(group="retrain.backends") if e.name == "unsloth"]
    definition = ep.load()
    assert isinstance(definition, catalog.BackendDefinition)
    assert definition.distribution == "retrain-backends-unsloth" and definition.available
    entry = catalog.lookup("unsloth")
    assert entry is not None and entry.installed and not entry.problems


def test_defaults_map_onto_from_pretrained_and_get_peft_model(tmp_path: Path) -> None:
    c = config(tmp_path, extra="[training]\nmax_tokens = 512\n")
    p = plan(c, "cuda:0")
    assert p.load["model_name"] == "org/m" and p.load["max_seq_length"] == 2048  # max(2048, max_tokens)
    assert p.load["load_in_4bit"] is True and p.quantized and p.load["full_finetuning"] is False
    assert p.load["device_map"] == {"": "cuda:0"} and p.load["max_lora_rank"] == 64
    assert p.load["use_gradient_checkpointing"] == "unsloth" and p.load["fast_inference"] is False
    assert p.peft["r"] == 16 and p.peft["lora_alpha"] == 32 and p.peft["target_modules"] == list(DEFAULT_TARGETS)
    assert p.peft["bias"] == "none" and p.peft["random_state"] == 3407 and p.tiled_mlp_mode == ""


def test_options_map_as_written(tmp_path: Path) -> None:
    c = config(tmp_path, "load_in_16bit = true\nmax_seq_length = 512\nmax_lora_rank = 8\ndevice_map = 'none'\n"
               "gradient_checkpointing = false\nlora_target_modules = 'q_proj, v_proj, q_proj'\n"
               "unsloth_tiled_mlp = true\nunsloth_tiled_mlp_mode = 'arctic'\nuse_rslora = true\n",
               "[lora]\nalpha = 8\n")
    p = plan(c, "cuda:1")
    assert p.load["load_in_16bit"] and not p.load["load_in_4bit"] and not p.quantized  # 16-bit implies not 4-bit
    assert p.load["max_seq_length"] == 512 == p.peft["max_seq_length"] and p.load["max_lora_rank"] == 16
    assert p.load["device_map"] is None and p.load["use_gradient_checkpointing"] is False
    assert p.peft["target_modules"] == ["q_proj", "v_proj"] and p.peft["lora_alpha"] == 8 and p.peft["use_rslora"]
    assert p.tiled_mlp_mode == "arctic" and p.load["unsloth_tiled_mlp"] is True


def test_fast_inference_is_refused_as_not_built(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        config(tmp_path, "fast_inference = true\n")
    (issue,) = info.value.issues
    assert "fast_inference" in issue.render() and "not built yet in this version" in issue.render()


def test_factory_refuses_without_a_cuda_gpu_in_one_line(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    from retrain.backends.unsloth.create import create_backend

    with pytest.raises(BackendUnavailable, match="needs a CUDA GPU") as info:
        create_backend(config(tmp_path))
    assert "\n" not in str(info.value)


def test_a_run_refuses_without_a_cuda_gpu_with_exit_2(tmp_path: Path) -> None:
    pytest.importorskip("retrain.cli", reason="the retrain command (retrain-cli) is not installed with this member alone")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    cfg = tmp_path / "run.toml"
    cfg.write_text(f"[model]\nmodel = 'tiny'\n[backend]\nbackend = 'unsloth'\ndevices = 'gpu:0'\n"
                   f"adapter_path = '{tmp_path / 'a'}'\n[training]\nmax_steps = 1\n[logging]\n"
                   f"log_dir = '{tmp_path / 'logs'}'\n[data]\nsource = 'arithmetic'\n")
    res = subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg)], capture_output=True, text=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300, check=False)
    assert res.returncode == 2, res.stderr
    assert "the unsloth backend needs a CUDA GPU" in res.stderr and "Traceback" not in res.stderr


def test_factory_refuses_several_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from retrain.backends.unsloth.create import create_backend

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(BackendUnavailable, match=r"on 2 processes .* not built yet"):
        create_backend(config(tmp_path))
