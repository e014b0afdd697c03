"""What each family's plan says about its layers (`retrain.models.layers`): the contract a
decoder that runs the weights itself reads, built from transformers' own configs."""

from __future__ import annotations

from tiny_families import GEMMA4, SHAPES, config_of
from transformers import AutoConfig

from retrain.models.family import family_of
from retrain.models.gemma4 import Gemma4
from retrain.models.layers import LayerPlan


def plan(name: str):  # type: ignore[no-untyped-def]
    config = config_of(name)
    return family_of(config).plan(config)


def test_every_family_has_a_plan_of_its_layers() -> None:
    for name in SHAPES:
        config = config_of(name)
        assert len(plan(name).layers) == config.get_text_config().num_hidden_layers, name


def test_the_plans_say_how_each_layer_runs() -> None:
    assert [layer.attention for layer in plan("qwen3_5 multimodal").layers] == ["linear", "full"]
    assert plan("qwen3_5 text").layers[0].conv_kernel == 4
    assert [(layer.attention, layer.window) for layer in plan("gemma3 multimodal").layers] == [("sliding", 4), ("full", 0)]
    assert all(layer.attention == "sliding" and layer.window == 4 for layer in plan("mistral short window").layers)
    assert all(layer == LayerPlan() for layer in plan("llama").layers)
    assert all(layer.mlp == "moe" and layer.experts == 4 and layer.experts_per_token == 2
               for layer in plan("qwen3_moe").layers)
    assert plan("granite").logit_scale == 4.0 and plan("gemma4 text").logit_softcap == 30.0
    assert plan("gemma4 multimodal").per_layer_inputs


def test_gemma4_shared_layers_read_the_last_earlier_layer_of_their_kind() -> None:
    config = AutoConfig.for_model("gemma4_text", **dict(GEMMA4, num_hidden_layers=6, num_kv_shared_layers=2,
                                                       layer_types=["sliding_attention", "full_attention"] * 3))
    layers = Gemma4().plan(config).layers
    assert [layer.kv_source for layer in layers] == [None, None, None, None, 2, 3]


def test_a_decoder_asks_the_plan_what_it_cannot_run() -> None:
    assert plan("llama").unsupported(columns=64) is None
    assert plan("mistral short window").unsupported(columns=4) is None  # a window the sequence fits
    assert "sliding window of 4 tokens" in str(plan("mistral short window").unsupported(columns=5))
    assert "linear attention (layer 0)" in str(plan("qwen3_5 text").unsupported(columns=8))
    assert "mixture-of-experts" in str(plan("qwen3_moe").unsupported(columns=8))
    assert "soft-capped" in str(plan("granite").unsupported(columns=8))
    assert plan("granite").unsupported(columns=8, head_math=True) is None
