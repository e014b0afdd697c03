"""transformers' forward in the decode loop (`forward.hf`) on every cache transformers 5 builds:
the prompt cache copied to each prompt's rows and finished rows dropped (`forward.rows`) give
the logits a fresh forward over each row's whole sequence gives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from tiny_families import hub_model

from retrain.inference_engine.pytorch.forward.hf import HFForward
from retrain.inference_engine.pytorch.sample import left_pad


def _quantised(config: Any) -> Any:
    """transformers' quantised layer storage (rows packed once past the residual length) with
    an exact codec: quanto and hqq are not installed here, and exact values compare exactly."""
    from transformers.cache_utils import Cache, QuantizedLayer

    class Packed(QuantizedLayer):
        def _quantize(self, tensor: torch.Tensor, axis: int) -> torch.Tensor:
            return tensor.clone()

        def _dequantize(self, q_tensor: torch.Tensor) -> torch.Tensor:
            return q_tensor

    return Cache(layers=[Packed(residual_length=2) for _ in range(config.num_hidden_layers)])


def _offloaded(config: Any) -> Any:
    from transformers.cache_utils import DynamicCache

    return DynamicCache(config=config, offloading=True)


def _static(config: Any) -> Any:
    from transformers.cache_utils import StaticCache

    return StaticCache(config=config, max_cache_len=32)


CACHES: dict[str, Callable[[Any], Any] | None] = {"built by the model": None, "offloaded": _offloaded,
                                                    "static": _static, "quantised": _quantised}
PROMPTS = [[1, 20, 30, 40, 50, 60, 70], [1, 33, 44]]


def decode(model: torch.nn.Module, forward: HFForward, rows: list[list[int]], steps: int) -> list[torch.Tensor]:
    """Greedy steps; after the second, rows 1 and 3 are dropped. Each step's logits per row."""
    out = [forward.first_logits()]
    live = list(range(len(rows)))
    for step in range(steps):
        token = out[-1].argmax(-1)
        for r, t in zip(live, token.tolist(), strict=True):
            rows[r].append(t)
        if step == 1 and forward.compactable:
            keep = torch.tensor([0, 2])
            forward.compact(keep)
            live = [live[i] for i in keep.tolist()]
            token = token[keep]
        out.append(forward.next_logits(token))
    return out


@pytest.mark.parametrize("cache", sorted(CACHES))
@pytest.mark.parametrize("name", ["llama", "mistral short window", "qwen3_5 text", "gemma3 text"])
def test_every_cache_gives_the_logits_of_a_fresh_forward(name: str, cache: str) -> None:
    model = hub_model(name)
    make = CACHES[cache]
    if make is not None and name != "llama":
        pytest.skip("the offloaded, static and quantised caches are exercised on one model")
    if cache == "offloaded" and not torch.cuda.is_available():
        pytest.skip("an offloaded cache moves layers between a CUDA device and the CPU")
    ids, mask = left_pad(PROMPTS, 0, torch.device("cpu"))
    expand = torch.tensor([0, 0, 1, 1])
    rows = [list(PROMPTS[int(p)]) for p in expand]
    with torch.no_grad():
        forward = HFForward(model, ids, mask, expand, use_cache=True,
                            cache=make(model.config) if make is not None else None)
        assert forward.compactable == (cache != "quantised")
        got = decode(model, forward, rows, 6)
        live = [0, 1, 2, 3]
        for step, logits in enumerate(got):
            if step == 2 and forward.compactable:
                live = [0, 2]
            for i, r in enumerate(live):
                seq = rows[r][:len(PROMPTS[int(expand[r])]) + step]
                want = model(input_ids=torch.tensor([seq])).logits[0, -1]
                assert torch.allclose(logits[i], want, atol=1e-5), (step, r)
