"""New logprobs of the selected tokens without the full-vocabulary log-softmax of the batch.

The backbone runs once over the rows, padded or packed (retrain.backends.local.packing);
only the hidden states of the positions the loss reads are gathered, and the head is applied
to those alone, in chunks, so memory scales with the number of those positions times the
vocabulary chunk rather than tokens x vocabulary (`train_selective_suffix_logits`, on by
default; off, the head runs over every position first, as a plain forward does). With a
sampler that truncates, each position is normalised over the kept set the sampler used
(retrain.backends.local.truncation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from retrain.backends.local.packing import Packed
from retrain.backends.local.truncation import Truncation, vocab_size
from retrain.models.families import head_math
from retrain.models.family import SoftCapped


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


def packed_hidden_states(model: Any, packed: Packed) -> torch.Tensor:
    """[T, H] last hidden states of the packed stream (retrain.backends.local.attention)."""
    from retrain.backends.local.attention import KEYWORD
    from retrain.backends.local.attention import packed as packed_mode

    backbone, _ = split_head(model)
    with packed_mode(model):
        out = backbone(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False,
                       **{KEYWORD: packed})
    hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    return hidden[0]


@dataclass
class CompiledHead:
    """`train_compile_selective_ce`: the selected positions' head and log-softmax as one
    compiled graph (retrain.kernels.compiled) where it applies: mode `auto` falls back to the
    kernels and records why, `require` raises instead. `backend` is torch.compile's."""

    mode: str = "off"  # off, auto or require
    min_tokens: int = 128
    backend: str = "inductor"
    batches: int = 0  # calls that ran compiled
    fallback: str = ""  # why the latest call that asked did not

    def refusal(self, selected: torch.Tensor, operands: Any) -> str:
        """Why this call cannot run compiled, or ""."""
        if operands is None or operands[2] is not None:
            return "lm_head_not_linear"  # a LoRA (or unknown) head: the kernels express it
        if selected.shape[0] < self.min_tokens:
            return "below_min_tokens"
        if not selected.is_cuda and self.backend == "inductor":
            return "not_cuda"
        return ""

    def run(self, selected: torch.Tensor, operands: Any, targets: torch.Tensor, temperature: float,
            floor: torch.Tensor | None) -> torch.Tensor | None:
        """The compiled logprobs, or None to take the kernels (`auto`)."""
        from retrain.kernels.compiled import compiled_selected_logprobs

        reason = self.refusal(selected, operands)
        if not reason:
            try:
                out = compiled_selected_logprobs(selected, operands[0], targets, bias=operands[1],
                                                 temperature=temperature, floor=floor, backend=self.backend)
                self.batches += 1
                return out
            except Exception as exc:  # a compiler failure of any kind: fall back, or raise below
                reason = f"runtime_{type(exc).__name__}"
        self.fallback = reason
        if self.mode == "require":
            raise RuntimeError(f"train_compile_selective_ce = \"require\" but this call cannot run compiled: {reason}")
        return None


@dataclass(frozen=True)
class Scoring:
    """How the trainer scores the selected tokens beyond the defaults: `truncation` is the
    sampler's rule, applied where `truncated` [N] (bool over the selected positions) is set,
    every selected position when None; `selective` = False runs the head at every position;
    `compiled` the compiled head, when asked for."""

    truncation: Truncation | None = None
    truncated: torch.Tensor | None = None
    selective: bool = True
    compiled: CompiledHead | None = None


PLAIN = Scoring()


def selected_logprobs_torch(hidden: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor,
                            temperature: float = 1.0, chunk: int = 1024,
                            floor: torch.Tensor | None = None) -> torch.Tensor:
    """log softmax(head(h) / T)[target] for each row of `hidden` [N, H], in fp32, by row chunks
    (over the kept set where `floor` [N] truncates)."""
    out = []
    for start in range(0, hidden.shape[0], chunk):
        h = hidden[start:start + chunk]
        logits = head(h).float()
        if temperature != 1.0:
            logits = logits / temperature
        t = targets[start:start + chunk]
        out.append(_gather_logprobs(logits, t, floor[start:start + chunk] if floor is not None else None))
    if not out:
        return hidden.new_zeros(0, dtype=torch.float32)
    return torch.cat(out)


def _gather_logprobs(z: torch.Tensor, targets: torch.Tensor, floor: torch.Tensor | None) -> torch.Tensor:
    if floor is not None:
        drop = z.detach() < floor[:, None]
        drop[torch.arange(z.shape[0], device=z.device), targets] = False
        z = z.masked_fill(drop, float("-inf"))
    return z.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(z, dim=-1)


def action_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, action: torch.Tensor,
                    temperature: float = 1.0, chunk: int = 0, *, packed: Packed | None = None,
                    scoring: Scoring = PLAIN) -> torch.Tensor:
    """[N] logprobs of the tokens at action positions (row-major order of `action` [B, L-1]).

    The head goes through retrain.kernels.selected_logprobs (Triton on CUDA, the chunked
    torch path elsewhere; never the [N, V] log-softmax); a head the kernels do not
    understand, or logits the model soft-caps (Gemma's `final_logit_softcapping`), fall back
    to chunked full-row logits here. A model that divides its logits (Granite's
    `logits_scaling`) divides the temperature's logits alike. `packed`: the rows'
    padding-free layout (input_ids still name the tokens, row by row).
    """
    from retrain.kernels import lm_head_operands, selected_logprobs

    if packed is not None:
        hidden = packed_hidden_states(model, packed)  # [T, H]
        where = packed.positions(action)
    else:
        padded = hidden_states(model, input_ids, attention_mask)  # [B, L, H]
        hidden = padded.reshape(-1, padded.shape[-1])  # a view: position j of row b is b * L + j
        rows, cols = action.nonzero(as_tuple=True)
        where = rows * input_ids.shape[1] + cols
    targets = input_ids[:, 1:][action]
    _, head = split_head(model)
    scale, softcap = head_math(model.config)  # what the model's own forward does after its head
    temperature = temperature * scale
    vocab = vocab_size(head)
    if softcap is not None:
        head = SoftCapped(head, softcap)  # type: ignore[assignment]
    selected = hidden[where]
    floor = None
    if scoring.truncation is not None:
        floor = scoring.truncation.floors(selected, head, temperature, scoring.truncated, vocab)
    if not scoring.selective:
        logits = head(hidden).float()  # every position's logits, as a plain forward makes them
        return _gather_logprobs(logits[where] / temperature, targets, floor)
    if softcap is not None:
        return selected_logprobs_torch(selected, head, targets, temperature, chunk or 1024, floor)
    operands = lm_head_operands(head)
    if scoring.compiled is not None and scoring.compiled.mode != "off":
        compiled = scoring.compiled.run(selected, operands, targets, temperature, floor)
        if compiled is not None:
            return compiled
    if operands is None:
        return selected_logprobs_torch(selected, head, targets, temperature, chunk or 1024, floor)
    weight, bias, lora = operands
    out: torch.Tensor = selected_logprobs(selected, weight, targets, bias=bias, lora=lora,
                                          temperature=temperature, chunk_size=chunk, floor=floor)
    return out

