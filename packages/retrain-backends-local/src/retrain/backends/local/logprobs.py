"""New logprobs of the selected tokens without the full-vocabulary log-softmax of the batch.

The backbone runs once over the padded rows; only the hidden states of action positions are
gathered, and the head is applied to those rows alone, in chunks, so memory scales with the
number of action tokens times the vocabulary chunk rather than batch x length x vocabulary.
"""

from __future__ import annotations

from typing import Any

import torch

from retrain.models.family import SoftCapped, head_math


def split_head(model: Any) -> tuple[Any, torch.nn.Module]:
    """(backbone returning last_hidden_state, lm_head) of a causal LM, peft-wrapped or not."""
    inner = model
    if hasattr(inner, "get_base_model"):
        inner = inner.get_base_model()
    backbone = getattr(inner, "model", None)
    head = getattr(inner, "lm_head", None)
    if backbone is None or head is None:
        raise TypeError(f"{type(inner).__name__} does not expose .model and .lm_head")
    return backbone, head


def hidden_states(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Last hidden states of right-padded rows. With right padding a causal model never lets a
    real token attend to padding, so no mask is passed: attention takes its fused causal path
    and outputs at real positions are exactly those of the masked computation."""
    backbone, _ = split_head(model)
    out = backbone(input_ids=input_ids, use_cache=False)
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def selected_logprobs_torch(hidden: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor,
                            temperature: float = 1.0, chunk: int = 1024) -> torch.Tensor:
    """log softmax(head(h) / T)[target] for each row of `hidden` [N, H], in fp32, by row chunks."""
    out = []
    for start in range(0, hidden.shape[0], chunk):
        h = hidden[start:start + chunk]
        logits = head(h).float()
        if temperature != 1.0:
            logits = logits / temperature
        t = targets[start:start + chunk]
        out.append(logits.gather(-1, t[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1))
    if not out:
        return hidden.new_zeros(0, dtype=torch.float32)
    return torch.cat(out)


def action_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, action: torch.Tensor,
                    temperature: float = 1.0, chunk: int = 0) -> torch.Tensor:
    """[N] logprobs of the tokens at action positions (row-major order of `action`).

    The head goes through retrain.kernels.selected_logprobs (Triton on CUDA, the chunked
    torch path elsewhere; never the [N, V] log-softmax); a head the kernels do not
    understand, or logits the model soft-caps (Gemma's `final_logit_softcapping`), fall back
    to chunked full-row logits here. A model that divides its logits (Granite's
    `logits_scaling`) divides the temperature's logits alike.
    """
    from retrain.kernels import lm_head_operands, selected_logprobs

    hidden = hidden_states(model, input_ids, attention_mask)[:, :-1]
    selected = hidden[action]
    targets = input_ids[:, 1:][action]
    _, head = split_head(model)
    scale, softcap = head_math(model.config)  # what the model's own forward does after its head
    if softcap is not None:
        return selected_logprobs_torch(selected, SoftCapped(head, softcap), targets, temperature * scale,
                                       chunk or 1024)
    temperature = temperature * scale
    operands = lm_head_operands(head)
    if operands is None:
        return selected_logprobs_torch(selected, head, targets, temperature, chunk or 1024)
    weight, bias, lora = operands
    out: torch.Tensor = selected_logprobs(selected, weight, targets, bias=bias, lora=lora,
                                          temperature=temperature, chunk_size=chunk)
    return out
