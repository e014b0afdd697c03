"""Batched sampling with a KV cache, in PyTorch, for the whole step at once.

All prompts x group members decode in one loop: each prompt is prefilled once, its cache
repeated `num_samples` times, then one token per row per iteration. Rows are left-padded;
position ids come from the attention mask so padding never shifts RoPE positions. A row stops
after its first EOS (the EOS is part of the completion); finished rows keep decoding pad
tokens that are dropped from the result.

The returned logprob of a token is its log-probability under the distribution it was drawn
from: softmax(logits / T), truncated to the top-p nucleus and renormalised. At T = 1 and
top_p = 1 this equals the training-side logprob of the same token.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from retrain.types import Completion


@dataclass
class SampleStats:
    prefill_s: float = 0.0
    decode_s: float = 0.0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    calls: int = 0
    extra: dict[str, float] = field(default_factory=dict)


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r):] = 1
    return ids.to(device), mask.to(device)


def _filter_top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero the tail outside the smallest set whose mass reaches top_p; renormalise."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(dim=-1, keepdim=True)


def choose(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None,
           want_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(token [B], logprob [B], entropy [B] or None) from last-position logits [B, V]."""
    logits = logits.float()
    if temperature <= 0.0:
        logp = torch.log_softmax(logits, dim=-1)
        token = torch.argmax(logits, dim=-1)
        entropy = -(logp.exp() * logp).nan_to_num().sum(-1) if want_entropy else None
        return token, logp.gather(-1, token[:, None]).squeeze(-1), entropy
    logp = torch.log_softmax(logits / temperature, dim=-1)
    probs = logp.exp()
    entropy = -(probs * logp).nan_to_num().sum(-1) if want_entropy else None
    if top_p < 1.0:
        probs = _filter_top_p(probs, top_p)
        token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        chosen = probs.gather(-1, token[:, None]).squeeze(-1).clamp_min(1e-12).log()
        return token, chosen, entropy
    token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return token, logp.gather(-1, token[:, None]).squeeze(-1), entropy


@torch.inference_mode()
def generate(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    num_samples: int,
    max_tokens: int,
    temperature: float,
    top_p: float,
    eos_ids: Sequence[int],
    pad_id: int,
    generator: torch.Generator | None = None,
    *,
    use_cache: bool = True,
    want_entropy: bool = False,
    stats: SampleStats | None = None,
) -> list[list[Completion]]:
    """`num_samples` completions for each prompt (outer list: prompts, inner: samples)."""
    if not prompts:
        return []
    device = next(model.parameters()).device
    stats = stats if stats is not None else SampleStats()
    stats.calls += 1
    t0 = time.perf_counter()
    ids, mask = left_pad(prompts, pad_id, device)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    rows = len(prompts) * num_samples
    # Prompts of one length need no mask: the fused causal attention path is exact and faster.
    padded = bool((mask == 0).any())
    if use_cache:
        out = model(input_ids=ids, attention_mask=mask if padded else None, position_ids=positions,
                    use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        logits = out.logits[:, -1, :]
        if num_samples > 1:
            cache.batch_repeat_interleave(num_samples)
            logits = logits.repeat_interleave(num_samples, dim=0)
        mask = mask.repeat_interleave(num_samples, dim=0)
        next_pos = positions[:, -1:].repeat_interleave(num_samples, dim=0) + 1
    else:
        cache = None
        ids = ids.repeat_interleave(num_samples, dim=0)
        mask = mask.repeat_interleave(num_samples, dim=0)
        out = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp_min(0),
                    use_cache=False, logits_to_keep=1)
        logits = out.logits[:, -1, :]
    stats.prefill_s += time.perf_counter() - t0
    stats.prompt_tokens += sum(len(p) for p in prompts)
    t1 = time.perf_counter()

    eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long, device=device)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    tokens: list[torch.Tensor] = []
    logprobs: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []
    ones = torch.ones((rows, 1), dtype=mask.dtype, device=device)
    for step in range(max_tokens):
        token, logp, ent = choose(logits, temperature, top_p, generator, want_entropy)
        token = torch.where(finished, torch.full_like(token, pad_id), token)
        tokens.append(token)
        logprobs.append(torch.where(finished, torch.zeros_like(logp), logp))
        if ent is not None:
            entropies.append(ent)
        finished = finished | torch.isin(token, eos)
        if bool(finished.all()) or step == max_tokens - 1:
            break
        mask = torch.cat([mask, ones], dim=1)
        if use_cache:
            out = model(input_ids=token[:, None], attention_mask=mask if padded else None, position_ids=next_pos,
                        past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            next_pos = next_pos + 1
        else:
            ids = torch.cat([ids, token[:, None]], dim=1)
            out = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp_min(0),
                        use_cache=False, logits_to_keep=1)
        logits = out.logits[:, -1, :]
    stats.decode_s += time.perf_counter() - t1

    tok = torch.stack(tokens, dim=1).cpu().tolist()
    lps = torch.stack(logprobs, dim=1).cpu().tolist()
    ents = torch.stack(entropies, dim=1).cpu().tolist() if entropies else None
    eos_set = set(int(e) for e in eos_ids)
    results: list[list[Completion]] = []
    for p in range(len(prompts)):
        group = []
        for s in range(num_samples):
            r = p * num_samples + s
            row, lp = tok[r], lps[r]
            end = next((i + 1 for i, t in enumerate(row) if t in eos_set), None)
            n = end if end is not None else len(row)
            stats.generated_tokens += n
            group.append(Completion(token_ids=row[:n], logprobs=lp[:n],
                                    finish_reason="stop" if end is not None else "length",
                                    entropies=ents[r][:n] if ents is not None else None))
        results.append(group)
    return results
