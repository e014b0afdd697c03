"""LoRA targets and layer selection; top-p sampling; the merged sampling copy."""

from __future__ import annotations

import pytest
import torch

from retrain.backends.local.backend import LocalBackend
from retrain.backends.local.lora import parse_layers
from retrain.inference_engine.pytorch.sample import choose


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
    token, logp, _ = choose(logits, 1.0, 0.5, g)
    assert set(token.tolist()) == {0} and torch.allclose(logp, torch.zeros_like(logp))
    token, logp, _ = choose(logits, 1.0, 0.9, g)
    assert set(token.tolist()) == {0, 1}
    p0 = torch.softmax(logits[0], -1)[:2]
    assert torch.allclose(logp[token == 0][0].exp(), p0[0] / p0.sum(), atol=1e-6)


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
