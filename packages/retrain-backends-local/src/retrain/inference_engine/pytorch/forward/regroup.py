"""Qwen3-Next's gated delta projections as Qwen3.5's: `in_proj_qkvz` and `in_proj_ba` hold, per
key head, that head's query, key, values and output gates (z) and its value heads' b and a
(`Qwen3NextGatedDeltaNet.fix_query_key_value_ordering`); Qwen3.5's layer keeps one projection
per part (`in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`), each part's heads in order.
Taking the rows of each part out of the grouped weight (and of its bias and LoRA B) gives the
same products, so the decoder's `GatedDelta` runs both layers."""

from __future__ import annotations

from typing import Any

import torch

from retrain.inference_engine.pytorch.forward.linear import Part, part


def gated_delta_parts(la: Any) -> tuple[Part, Part, Part, Part]:
    """(qkv, z, b, a) of a Qwen3-Next gated delta layer `la`, as Qwen3.5's projections."""
    k_heads, v_heads, dk, dv = int(la.num_k_heads), int(la.num_v_heads), int(la.head_k_dim), int(la.head_v_dim)
    per = v_heads // k_heads  # value heads per key head
    width = 2 * dk + 2 * per * dv  # one key head's rows of in_proj_qkvz: q, k, v, z
    group = torch.arange(k_heads)[:, None]

    def rows(offset: int, size: int, stride: int) -> torch.Tensor:
        return (group * stride + offset + torch.arange(size)[None]).flatten()

    q, k = rows(0, dk, width), rows(dk, dk, width)
    v, z = rows(2 * dk, per * dv, width), rows(2 * dk + per * dv, per * dv, width)
    b, a = rows(0, per, 2 * per), rows(per, per, 2 * per)
    qkvz, ba = part(la.in_proj_qkvz), part(la.in_proj_ba)
    return _rows(qkvz, torch.cat([q, k, v])), _rows(qkvz, z), _rows(ba, b), _rows(ba, a)


def _rows(whole: Part, index: torch.Tensor) -> Part:
    index = index.to(whole.weight.device)
    return Part(whole.weight[index], whole.bias[index] if whole.bias is not None else None,
                tuple((a, b_[index], s) for a, b_, s in whole.loras))
