"""What each family's plan says about its layers (`retrain.models.layers`): the contract a
decoder that runs the weights itself reads, built from transformers' own configs."""

from __future__ import annotations

from tiny_families import GEMMA3, GEMMA4, SHAPES, config_of
from transformers import AutoConfig

from retrain.models.families import family_of
from retrain.models.gemma3 import Gemma3
from retrain.models.gemma4 import Gemma4
from retrain.models.layers import Implements, LayerPlan


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


def test_the_plans_say_what_the_module_tree_does_not() -> None:
    assert (plan("qwen3_5 text").norm, plan("qwen3_5 text").attention_gate, plan("qwen3_5 text").rope_axes) == \
        ("fp32 1 + weight", True, 3)
    assert plan("gemma3 multimodal").norm == "fp32 1 + weight" and plan("gemma4 text").norm == "fp32 weight"
    assert plan("llama").norm == "weight" and not plan("llama").attention_gate
    assert [layer.rope for layer in plan("gemma3 text").layers] == ["sliding_attention", "full_attention"]
    assert all(layer.rope == "" for layer in plan("mistral short window").layers)
    assert all(layer.mlp == "dense+moe" for layer in plan("gemma4 moe").layers)
    assert all(layer.mlp == "moe" for layer in plan("qwen3_5 moe").layers)


def test_a_plan_says_what_it_leaves_unstated() -> None:
    """Families whose layers compute more than a plan's fields say so; a decoder runs none of
    them."""
    for name in ("smollm3", "olmo2", "phi3", "granite"):
        kind = SHAPES[name][0]
        assert plan(name).unstated.startswith(f"model type {kind!r}: "), name
    for name in ("llama", "mistral short window", "qwen2", "qwen3", "qwen3_moe", "qwen3_5 text", "gemma3 text",
                 "gemma4 multimodal", "gpt_oss", "mixtral", "qwen2_moe", "olmoe", "deepseek_v3", "glm4_moe",
                 "qwen3_next", "llama4_text"):
        assert plan(name).unstated == "", name
    bidirectional = AutoConfig.for_model("gemma3_text", **dict(GEMMA3, use_bidirectional_attention=True))
    assert "bidirectional" in Gemma3().plan(bidirectional).unstated


def test_a_decoder_asks_the_plan_what_it_cannot_run() -> None:
    from retrain.inference_engine.pytorch.forward.build import IMPLEMENTS

    assert plan("llama").unsupported(columns=64) is None
    assert plan("mistral short window").unsupported(columns=4) is None  # a window the sequence fits
    assert "sliding window of 4 tokens" in str(plan("mistral short window").unsupported(columns=5))
    assert plan("mistral short window").unsupported(columns=5, implements=Implements(attention=("full", "sliding"))) is None
    assert "linear attention (layer 0)" in str(plan("qwen3_5 text").unsupported(columns=8))
    assert "mixture-of-experts" in str(plan("qwen3_moe").unsupported(columns=8))
    gemma = dict(attention=("full", "sliding"), norms=("fp32 weight",))
    assert "soft-capped" in str(plan("gemma4 text").unsupported(columns=8, implements=Implements(**gemma)))  # type: ignore[arg-type]
    assert "per-layer input" in str(plan("gemma4 text").unsupported(
        columns=8, implements=Implements(head_math=True, **gemma)))  # type: ignore[arg-type]
    assert "keys and values shared with layer 1 (layer 3)" in str(plan("gemma4 shared kv").unsupported(
        columns=8, implements=Implements(head_math=True, per_layer_inputs=True, **gemma)))  # type: ignore[arg-type]
    assert "RMSNorms applied as fp32 1 + weight" in str(plan("gemma3 text").unsupported(
        columns=8, implements=Implements(**gemma)))  # type: ignore[arg-type]
    assert "gated attention" in str(plan("qwen3_5 text").unsupported(
        columns=8, implements=Implements(attention=("full", "linear"), norms=("fp32 1 + weight",))))
    moe = Implements(mlp=("dense", "moe"), routing=("softmax",))
    assert "experts routed by grouped sigmoid (layer 1)" in str(plan("glm4_moe").unsupported(columns=8, implements=moe))
    assert "latent attention (layer 0)" in str(plan("deepseek_v3").unsupported(columns=8, implements=moe))
    assert "attention sinks (layer 0)" in str(plan("gpt_oss").unsupported(
        columns=4, implements=Implements(mlp=("dense", "moe"), routing=("softmax of top k",),
                                         norms=("fp32 weight",), rope_tables=("pairs",))))
    assert "attention in chunks of 4 tokens" in str(plan("llama4_text").unsupported(columns=8))
    assert "clipped queries" in str(plan("olmoe").unsupported(columns=8, implements=moe))
    assert "model type 'granite'" in str(plan("granite").unsupported(columns=8, implements=IMPLEMENTS))
    for name in ("qwen3_5 moe", "gemma4 shared kv", "gemma4 moe", "qwen3_5 multimodal", "gemma3 multimodal",
                 "gpt_oss", "mixtral", "qwen2_moe", "olmoe", "deepseek_v3", "glm4_moe", "qwen3_next", "llama4_text"):
        assert plan(name).unsupported(columns=8, implements=IMPLEMENTS) is None, name


def test_the_moe_families_plans_say_their_layer_kinds() -> None:
    gpt = plan("gpt_oss")
    assert all(layer.sinks and layer.routing == "softmax of top k" for layer in gpt.layers)
    assert (gpt.norm, gpt.rope_tables) == ("fp32 weight", "pairs")
    deepseek = plan("deepseek_v3")
    assert [(layer.attention, layer.mlp, layer.routing) for layer in deepseek.layers] == [
        ("latent", "dense", ""), ("latent", "moe", "grouped sigmoid")]
    assert [layer.mlp for layer in plan("glm4_moe").layers] == ["dense", "moe"]
    assert plan("olmoe").clip_qkv == 0.5
    llama4 = plan("llama4_text")
    assert [(layer.attention, layer.rotary, layer.mlp) for layer in llama4.layers] == [
        ("chunked", True, "dense"), ("full", False, "moe")]
    assert llama4.layers[1].routing == "sigmoid of top k, on inputs"
    assert (llama4.rope_tables, llama4.rope_pairs) == ("complex", "interleaved")
    next_ = plan("qwen3_next")
    assert [layer.attention for layer in next_.layers] == ["linear", "full"]
    assert (next_.norm, next_.attention_gate) == ("fp32 1 + weight", True)
