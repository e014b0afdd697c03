"""The FLOPs count behind `mfu` (retrain.backends.local.throughput): what it reads of a model's
shapes, LoRA-aware, and the count of one update worked by hand."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

from retrain.backends.local.distributed import decoder_layers
from retrain.backends.local.logprobs import split_head
from retrain.backends.local.throughput import Shape

BASE = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=64)


def shape(model: torch.nn.Module) -> Shape:
    return Shape.of(model, decoder_layers(model), split_head(model)[1])


@pytest.mark.parametrize(("model_type", "extra", "width"), [
    ("llama", {}, 4 * 8),
    ("qwen3", dict(head_dim=16), 4 * 16),  # head_dim apart from hidden / heads
    # a gated query projection twice as wide as the attention it feeds
    ("qwen3_next", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                        layer_types=["full_attention", "full_attention"]), 4 * 8),
    ("phi", {}, 4 * 8),  # its output projection is `dense`: the config's figure
])
def test_the_attention_width_is_heads_times_head_dim(model_type: str, extra: dict[str, object], width: int) -> None:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **{**BASE, **extra}))
    assert shape(model).attention == 2 * width


def test_a_lora_update_counts_its_flops_by_hand() -> None:
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **BASE))
    model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    s = shape(model)
    per_layer = 32 * 32 + 16 * 32 + 16 * 32 + 32 * 32 + 3 * 48 * 32  # q k v o, gate up down
    lora = (4 * 32 + 32 * 4) + (4 * 32 + 16 * 4)  # q's A and B, v's A and B
    assert (s.frozen, s.trainable, s.attention, s.head, s.head_trains) == (2 * per_layer, 2 * lora, 64, 64 * 32,
                                                                          False)
    weights, trainable = 2 * (per_layer + lora), 2 * lora
    tokens, rows, selected = 12, [5, 7], 6
    attention = 2 * 64 * (25 + 49)
    forward = 2 * weights * tokens + attention + 2 * 64 * 32 * selected
    # backward: each input's gradient (the frozen base's too), LoRA's weight gradients,
    # attention twice, the head's input gradient only (it does not train)
    backward = 2 * weights * tokens + 2 * trainable * tokens + 2 * attention + 2 * 64 * 32 * selected
    assert s.flops(tokens, rows, selected) == forward + backward
    # a reference forward, and half the layers recomputed under checkpointing
    layers_forward = 2 * weights * tokens + attention
    assert s.flops(tokens, rows, selected, 0.5, 1) == 2 * forward + backward + 0.5 * layers_forward
