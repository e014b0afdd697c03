"""Training throughput: tokens per second of an update and, on CUDA, its model FLOPs utilisation.

`mfu` is the FLOPs the update's forward and backward passes ran, counted from the model's
shapes, over the update's wall time times the device's dense bf16 peak (a small table by
device name; an unknown device gets no `mfu`). Counted per token the layers ran over (a
packed stream's tokens, or rows x width when padded), with x the matrices' weights:

- forward: 2 x every decoder-layer weight (LoRA's A and B included) per token, plus causal
  attention, 2 x heads x head_dim x L^2 per row of length L (QK^T and PV over the causal
  half), plus the LM head, 2 x V x H per position the loss reads;
- backward: the gradient reaching each layer's input, 2 x weight per token, plus each
  trainable weight's own gradient, 2 x weight per token (so a frozen LoRA base costs 2, not
  4), attention twice its forward, the head's input gradient (and its weight's when it
  trains);
- gradient checkpointing (CUDA) runs each checkpointed layer's forward once more, and a
  reference policy (the KL penalty) or a selecting objective (kl_cov, clip_cov) one more
  forward without backward.

Embedding lookups, norms and element-wise work are left out, as in the usual 6ND count.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Dense bf16 tensor-core peak, FLOP/s, by a substring of torch.cuda.get_device_name
PEAK_BF16 = (("H200", 989e12), ("H100", 989e12), ("H800", 989e12), ("B200", 2250e12), ("GH200", 989e12),
             ("A100", 312e12), ("A800", 312e12), ("L40S", 362e12), ("L40", 181e12), ("L4", 121e12),
             ("A10G", 70e12), ("A10", 125e12), ("RTX 4090", 165e12), ("RTX 3090", 71e12))


def peak_flops(device: torch.device) -> float:
    """The device's bf16 peak, 0 when it is not in the table (or not CUDA)."""
    if device.type != "cuda":
        return 0.0
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16 if key in name), 0.0)


@dataclass(frozen=True)
class Shape:
    """What the FLOPs count needs of a model, read once."""

    frozen: int  # decoder-layer matrix weights that do not train
    trainable: int  # decoder-layer matrix weights that train (LoRA's A and B, or every weight)
    attention: int  # heads x head_dim of each layer, summed over the layers
    head: int  # V x H of the LM head
    head_trains: bool
    layers: int

    @classmethod
    def of(cls, model: torch.nn.Module, layer_list: list[torch.nn.Module], head: torch.nn.Module) -> Shape:
        frozen = trainable = 0
        for layer in layer_list:
            for p in layer.parameters():
                if p.dim() == 2:
                    if p.requires_grad:
                        trainable += p.numel()
                    else:
                        frozen += p.numel()
        head_params = [p for p in head.parameters() if p.dim() == 2]
        return cls(frozen, trainable, sum(_query_width(layer, model) for layer in layer_list),
                   sum(p.numel() for p in head_params), any(p.requires_grad for p in head_params), len(layer_list))

    def flops(self, tokens: int, row_lengths: list[int], selected: int, recompute: float = 0.0,
              forwards: int = 0) -> float:
        """FLOPs of one forward + backward over `tokens` layer tokens, rows of `row_lengths`
        (attention), `selected` head positions; `recompute`: the share of layers whose forward
        runs again in the backward; `forwards`: forward passes without backward besides."""
        weights = self.frozen + self.trainable
        attention = 2.0 * self.attention * sum(n * n for n in row_lengths)
        layers_fwd = 2.0 * weights * tokens + attention
        layers_bwd = 2.0 * weights * tokens + 2.0 * self.trainable * tokens + 2.0 * attention
        head_fwd = 2.0 * self.head * selected
        head_bwd = head_fwd * (2 if self.head_trains else 1)
        return (layers_fwd + head_fwd) * (1 + forwards) + layers_fwd * recompute + layers_bwd + head_bwd


def _query_width(layer: torch.nn.Module, model: torch.nn.Module) -> int:
    """heads x head_dim of a decoder layer's attention: the inputs of its output projection
    (`o_proj`), a per-layer figure (some families vary heads or head_dim by layer) that a gated
    query projection (Qwen3-Next's, twice as wide) does not inflate; else the config's."""
    for name, module in layer.named_modules():
        if name.rsplit(".", 1)[-1] == "o_proj":
            get_base = getattr(module, "get_base_layer", None)
            width = getattr(get_base() if callable(get_base) else module, "in_features", None)
            if isinstance(width, int):
                return width
    config = getattr(model, "config", None)
    text = getattr(config, "text_config", None) or config
    try:
        heads = int(getattr(text, "num_attention_heads", 0) or 0)
        return heads * int(getattr(text, "head_dim", 0) or getattr(text, "hidden_size", 0) // max(heads, 1))
    except Exception:  # a config that refuses global per-layer attributes: no attention count
        return 0
