"""`--format adapter`: the trained LoRA adapter as a PEFT folder an inference server loads onto
the base (vLLM's `--lora-modules NAME=FOLDER`, SGLang's `--lora-paths`, peft's
`PeftModel.from_pretrained`): `adapter_config.json`, naming the base the run trained on, and
`adapter_model.safetensors`, nothing of the checkpoint besides (no optimizer, RNG streams or
trainer state). A multimodal checkpoint's adapter already names the hub class's modules
(`retrain.models.multimodal`), which is what those servers map onto their own.
"""

from __future__ import annotations

import json
from pathlib import Path

from retrain.backends.export import ExportRequest
from retrain.backends.local.checkpointing import weights_folder
from retrain.errors import UserError
from retrain.models.tiny import is_tiny

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def check_adapter(request: ExportRequest) -> Path:
    """The folder holding the adapter; UserError when there is none to export on its own."""
    if not request.lora:
        raise UserError(f"{request.weights} holds the full model's weights (a run with train_full_model = true), "
                        "not a LoRA adapter", hint="--format hf exports the model")
    if is_tiny(request.base.name):
        raise UserError("--format adapter: the adapter's base is the built-in 'tiny', whose weights exist only "
                        "inside retrain (made from the seed), so no server can load the adapter onto it",
                        hint="--format hf exports the model with the adapter merged in")
    folder = weights_folder(request.weights, lora=True)
    missing = [name for name in ADAPTER_FILES if not (folder / name).is_file()]
    if missing:
        raise UserError(f"{folder} lacks {', '.join(missing)}: not a LoRA adapter folder")
    return folder


def write_adapter(request: ExportRequest, out: Path) -> list[str]:
    folder = check_adapter(request)
    config = json.loads((folder / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = request.base.name
    if request.base.revision:
        config["revision"] = request.base.revision
    config["inference_mode"] = True
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    _write_weights(folder / "adapter_model.safetensors", out / "adapter_model.safetensors", request.dtype)
    rank, alpha = config.get("r"), config.get("lora_alpha")
    return [f"LoRA rank {rank}, alpha {alpha}, on {_targets(config.get('target_modules'))} of {request.base.name}"]


def _write_weights(source: Path, target: Path, dtype: str) -> None:
    """The adapter's tensors, cast to `dtype` unless it is auto (as trained)."""
    import shutil

    if dtype == "auto":
        shutil.copyfile(source, target)
        return
    import torch
    from safetensors.torch import load_file, save_file

    cast = getattr(torch, dtype)
    save_file({k: v.to(cast) if v.is_floating_point() else v for k, v in load_file(str(source)).items()},
              str(target), metadata={"format": "pt"})


def _targets(targets: object) -> str:
    if isinstance(targets, list):
        return f"{len(targets)} modules" if len(targets) > 7 else ", ".join(sorted(targets))
    return str(targets)
