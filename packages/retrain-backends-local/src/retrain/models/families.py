"""The model families retrain knows, and the lookup of a model's family by its config's
`model_type`. A new family is a module beside `family.py` and one entry in `families()`.

This module imports every family module; `family.py` (the base class, which each family
module imports) imports none of them, so the lookup lives here and not there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from retrain.errors import UserError
from retrain.models import (
    deepseek_v3,
    gemma3,
    gemma4,
    glm4_moe,
    gpt_oss,
    llama4,
    mixtral,
    olmoe,
    qwen2_moe,
    qwen3_moe,
    qwen3_next,
    qwen35,
)
from retrain.models.family import Family, text_config


def families() -> tuple[Family, ...]:
    return (qwen35.Qwen35(), gemma3.Gemma3(), gemma4.Gemma4(), qwen3_moe.Qwen3Moe(), gpt_oss.GptOss(),
            mixtral.Mixtral(), qwen2_moe.Qwen2Moe(), olmoe.Olmoe(), deepseek_v3.DeepseekV3(), glm4_moe.Glm4Moe(),
            qwen3_next.Qwen3Next(), llama4.Llama4())


def family_of(config: Any) -> Family:
    """The family of a model's config (a multimodal config or its text config alike)."""
    kinds = {str(getattr(config, "model_type", "")), str(getattr(text_config(config), "model_type", ""))}
    for family in families():
        if kinds & set(family.model_types):
            return family
    return Family()


def prepare_family(family: Family, model: Any, options: Mapping[str, Any]) -> dict[str, float | int | str]:
    """`family.prepare`, after refusing (UserError) an option of another family set away from
    its default: it would change nothing for this model."""
    for other in families():
        if type(other) is type(family):
            continue
        for key, default in other.options.items():
            if key in options and options[key] != default and key not in family.options:
                kind = getattr(model.config, "model_type", "?")
                raise UserError(f"[backend.options] {key} = {options[key]!r} applies to {other.name} models, "
                                f"and this model is a {kind}", hint="remove it")
    return family.prepare(model, options)


def head_math(config: Any) -> tuple[float, float | None]:
    """(scale, soft-cap) a causal LM applies to its head's logits: logits / scale (Granite's
    `logits_scaling`), then cap * tanh(logits / cap) (Gemma's `final_logit_softcapping`)."""
    plan = family_of(config).plan(config)
    return plan.logit_scale, plan.logit_softcap
