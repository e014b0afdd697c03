"""LoRA targets and layer selection; top-p sampling; the merged sampling copy."""

from __future__ import annotations

import pytest
import torch

from retrain.backends.local.backend import LocalBackend
from retrain.backends.local.lora import parse_layers
from retrain.inference_engine.pytorch.choice import choose
from retrain.inference_engine.pytorch.sample import generate
from retrain.types import SamplingParams


def test_parse_layers() -> None:
    assert parse_layers("", 4) is None and parse_layers("all", 4) is None
    assert parse_layers("last:2", 4) == [2, 3] and parse_layers("first:1", 4) == [0]
    assert parse_layers("0,2-3", 4) == [0, 2, 3]
    with pytest.raises(ValueError, match="outside"):
        parse_layers("5", 4)


def test_target_modules_and_layers(tiny_config) -> None:  # type: ignore[no-untyped-def]
    b = LocalBackend(tiny_config("--backend-opt", "lora_target_modules=q_proj,v_proj",
                                 "--backend-opt", "lora_layers_to_transform=last:1"))
    adapted = {n.split(".lora_A")[0] for n, _ in b.model.named_parameters() if ".lora_A" in n}
    assert adapted == {"base_model.model.model.layers.3.self_attn.q_proj",
                       "base_model.model.model.layers.3.self_attn.v_proj"}


def test_top_p_keeps_the_nucleus() -> None:
    logits = torch.tensor([[4.0, 3.0, -5.0, -6.0]]).repeat(2000, 1)
    g = torch.Generator().manual_seed(0)
    c = choose(logits, SamplingParams(max_tokens=1, top_p=0.5), g)
    assert set(c.token.tolist()) == {0} and torch.allclose(c.logprob, torch.zeros_like(c.logprob))
    c = choose(logits, SamplingParams(max_tokens=1, top_p=0.9), g)
    assert set(c.token.tolist()) == {0, 1}
    p0 = torch.softmax(logits[0], -1)[:2]
    assert torch.allclose(c.logprob[c.token == 0][0].exp(), p0[0] / p0.sum(), atol=1e-6)


def test_top_k_and_min_p_keep_their_sets_and_renormalise() -> None:
    logits = torch.tensor([[3.0, 2.5, 2.0, 0.0, -1.0]]).repeat(3000, 1)
    probs = torch.softmax(logits[0], -1)
    g = torch.Generator().manual_seed(1)
    c = choose(logits, SamplingParams(max_tokens=1, top_k=2), g)
    assert set(c.token.tolist()) == {0, 1}
    assert torch.allclose(c.logprob[c.token == 1][0].exp(), probs[1] / probs[:2].sum(), atol=1e-6)
    # min_p = 0.5: keeps tokens with p >= 0.5 * p_max, i.e. 0 and 1 (e^-0.5 = 0.61), not 2 (e^-1 = 0.37)
    c = choose(logits, SamplingParams(max_tokens=1, min_p=0.5), g)
    assert set(c.token.tolist()) == {0, 1}
    # top_k = 3 then top_p on the renormalised three: 0 (0.51 of the three) then 1 reaches 0.8
    c = choose(logits, SamplingParams(max_tokens=1, top_k=3, top_p=0.8), g)
    assert set(c.token.tolist()) == {0, 1}
    top3 = probs[:3] / probs[:3].sum()
    assert torch.allclose(c.logprob[c.token == 0][0].exp(), top3[0] / top3[:2].sum(), atol=1e-6)


def test_top_k_1_is_greedy_and_its_behaviour_logprobs_are_0(tiny_config) -> None:  # type: ignore[no-untyped-def]
    b = LocalBackend(tiny_config())
    prompts = [b.tokenizer.encode_prompt("3+4="), b.tokenizer.encode_prompt("12+30=")]
    eos, pad = b.tokenizer.eos_token_ids, b.tokenizer.pad_token_id
    model = b.sampler.model if b.sampler is not None else b.model
    greedy = generate(model, prompts, 3, SamplingParams(max_tokens=8, temperature=0.0), eos, pad)
    out = b.sample(prompts, 3, SamplingParams(max_tokens=8, temperature=1.3, top_k=1))
    for want, got in zip(greedy, out, strict=True):
        for g_c, c in zip(want, got, strict=True):
            assert c.token_ids == g_c.token_ids and c.logprobs == [0.0] * len(c.token_ids)


def test_merged_sampler_matches_the_adapter(tiny_config) -> None:  # type: ignore[no-untyped-def]
    b = LocalBackend(tiny_config())
    assert b.sampler is not None and len(b.sampler.pairs) == 28
    with torch.no_grad():
        for n, p in b.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    b.sampler.refresh()
    ids = torch.tensor([b.tokenizer.encode_prompt("3+3=")])
    with torch.no_grad():
        assert torch.allclose(b.sampler.model(input_ids=ids).logits, b.model(input_ids=ids).logits, atol=1e-5)
    off = LocalBackend(tiny_config("--backend-opt", "sample_merged_lora=false"))
    assert off.sampler is None


def test_the_merged_copy_merges_peft_lora_on_fused_experts(tiny_config, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """peft's v4-to-v5 conversion adapts DeepSeek-V3's fused experts as parameters: the copy
    merges them, from the live adapter and from a published version alike."""
    from tiny_families import write_checkpoint

    b = LocalBackend(tiny_config("--model", str(write_checkpoint("deepseek_v3", tmp_path / "model"))))
    assert b.sampler is not None and len(b.sampler.params) == 2  # gate_up_proj and down_proj of layer 1
    with torch.no_grad():
        for n, p in b.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    b.sampler.refresh()
    ids = torch.tensor([[1, 20, 30, 40, 50]])
    with torch.no_grad():
        want = b.model(input_ids=ids).logits
        assert torch.allclose(b.sampler.model(input_ids=ids).logits, want, atol=1e-5)
        published = {n: p.detach().clone() for n, p in b.model.named_parameters() if "lora_" in n}
        for n, p in b.model.named_parameters():
            if "lora_B" in n:
                p.zero_()
        b.sampler.refresh()
        assert not torch.allclose(b.sampler.model(input_ids=ids).logits, want, atol=1e-3)
        b.sampler.load(published)
        assert torch.allclose(b.sampler.model(input_ids=ids).logits, want, atol=1e-5)
