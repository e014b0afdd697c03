"""What skyrl-tx 0.3.0 imports but the test server leaves out, for both of its processes.

skyrl-tx imports `peft` only to write `adapter_config.json` beside a LoRA checkpoint, and peft
pulls torch (with CUDA, gigabytes). The stand-in writes the same file with the fields
`peft.PeftModel.from_pretrained` reads; retrain completes `target_modules` from the weights when
it downloads an adapter, as it must for the real service's archives too.
"""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types
from pathlib import Path
from typing import Any


class LoraConfig:
    def __init__(self, *, base_model_name_or_path: str | None = None, r: int = 8, lora_alpha: float = 8,
                 **extra: Any) -> None:
        self.fields: dict[str, Any] = {
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model_name_or_path,
            "r": r, "lora_alpha": lora_alpha, "lora_dropout": 0.0, "bias": "none", "target_modules": None,
            "inference_mode": True, **extra,
        }

    def save_pretrained(self, folder: str | Path) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "adapter_config.json").write_text(json.dumps(self.fields, indent=2))


def install() -> None:
    if "peft" in sys.modules:
        return
    module = types.ModuleType("peft")
    module.LoraConfig = LoraConfig  # type: ignore[attr-defined]
    module.__version__ = "0.0.0+txserver-standin"  # type: ignore[attr-defined]
    module.__spec__ = importlib.machinery.ModuleSpec("peft", None)  # transformers probes find_spec
    sys.modules["peft"] = module
