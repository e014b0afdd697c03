"""From a retrain config to Unsloth's calls (imports neither torch nor unsloth).

`FastLanguageModel.from_pretrained(**plan.load)` loads the policy, `get_peft_model(model,
**plan.peft)` adds retrain's LoRA (same targets, rank, alpha, dropout as the local backend).
Full fine-tuning is not offered: the backend's contract is an adapter (its option schema has
no train_full_model). Options that only serve Unsloth's vLLM generation (fast_inference and
its memory settings) are refused at load as not built: sampling runs retrain's engine on the
model in Unsloth's inference mode, or the configured inference server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from retrain.config.schema import TrainConfig

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
OFF = ("", "false", "off", "0", "no", "none")


@dataclass(frozen=True)
class UnslothPlan:
    load: dict[str, Any]  # FastLanguageModel.from_pretrained keyword arguments
    peft: dict[str, Any]  # FastLanguageModel.get_peft_model keyword arguments (model aside)
    tiled_mlp_mode: str  # UNSLOTH_TILED_MLP for the duration of from_pretrained; "" = unset

    @property
    def quantized(self) -> bool:
        """4- or 8-bit weights are placed by Unsloth and never moved with .to()."""
        return bool(self.load["load_in_4bit"] or self.load["load_in_8bit"])


def targets(raw: str) -> list[str]:
    names = list(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
    return list(DEFAULT_TARGETS) if not names or names in (["default"], ["defaults"]) else names


def device_map(raw: str, train_device: str) -> Any:
    if raw.strip().lower() in ("", "retrain"):
        return {"": train_device}
    if raw.strip().lower() in ("none", "null"):
        return None
    return raw


def checkpointing(raw: str, enabled: bool) -> Any:
    """Unsloth's use_gradient_checkpointing: "unsloth" (its offloaded variant), True, or False."""
    if not enabled or raw.strip().lower() in OFF:
        return False
    return True if raw.strip().lower() in ("true", "on", "1", "yes") else raw


def plan(config: TrainConfig, train_device: str) -> UnslothPlan:
    o, t, m = config.backend.options, config.training, config.model
    rank = m.lora_rank
    ckpt = checkpointing(str(o.get("use_gradient_checkpointing", "unsloth")), bool(o.get("gradient_checkpointing", True)))
    seq = int(o.get("max_seq_length", 0))
    max_seq_length = seq if seq > 0 else max(2048, t.max_tokens)
    random_state = int(o.get("random_state", 3407))
    load = {
        "model_name": m.model,
        "max_seq_length": max_seq_length,
        "dtype": None,  # Unsloth picks bf16 where the GPU has it, else fp16
        "load_in_4bit": bool(o.get("load_in_4bit", True)),
        "load_in_8bit": bool(o.get("load_in_8bit", False)),
        "load_in_16bit": bool(o.get("load_in_16bit", False)),
        "full_finetuning": False,
        "device_map": device_map(str(o.get("device_map", "retrain")), train_device),
        "fast_inference": False,
        "max_lora_rank": max(rank, int(o.get("max_lora_rank", 64))),
        "use_gradient_checkpointing": ckpt,
        "trust_remote_code": bool(o.get("trust_remote_code", False)),
        "use_exact_model_name": bool(o.get("use_exact_model_name", False)),
        "offload_embedding": bool(o.get("offload_embedding", False)),
        "random_state": random_state,
        "unsloth_tiled_mlp": bool(o.get("unsloth_tiled_mlp", False)),
        "text_only": bool(o.get("text_only", False)),
    }
    if m.revision:
        load["revision"] = m.revision
    peft = {
        "r": rank,
        "target_modules": targets(str(o.get("lora_target_modules", ""))),
        "lora_alpha": config.lora.alpha if config.lora.alpha > 0 else 2 * rank,
        "lora_dropout": config.lora.dropout,
        "bias": "none",
        "use_gradient_checkpointing": ckpt,
        "random_state": random_state,
        "max_seq_length": max_seq_length,
        "use_rslora": bool(o.get("use_rslora", False)),
    }
    mode = str(o.get("unsloth_tiled_mlp_mode", "")).strip() if load["unsloth_tiled_mlp"] else ""
    return UnslothPlan(load, peft, mode)
