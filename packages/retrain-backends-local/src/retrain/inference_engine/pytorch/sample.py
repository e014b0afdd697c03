"""Batched sampling with a KV cache, in PyTorch, for the whole step at once.

All prompts x group members decode in one loop: each prompt is prefilled once, its cache
repeated `num_samples` times, then one token per row per iteration. Rows are left-padded;
position ids come from the attention mask so padding never shifts RoPE positions. A row stops
after its first EOS (the EOS is part of the completion); finished rows keep decoding pad
tokens that are dropped from the result.

The returned logprob of a token is its log-probability under the distribution it was drawn
from: softmax(logits / T), truncated by top-k, the top-p nucleus and min-p, renormalised
(`retrain.types.SamplingParams`). At T = 1 with no truncation it equals the training-side
logprob of the same token; with top_k = 1 it is 0 (the draw is certain).

`decode` samples several *segments* in one batch: a segment is the rows of one request (n
completions of each of its prompts) with its own parameters and random generator. The
in-process engine samples one segment per step; `retrain serve` one per HTTP request, so a
request with a seed draws exactly what the in-process engine draws with that seed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from retrain.types import Completion, SamplingParams


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


def _truncate(probs: torch.Tensor, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """top-k, then the top-p nucleus of the renormalised rest, then min-p; renormalised.
    min-p compares with the most likely token, which every filter keeps, so its place in
    the order does not change what it keeps."""
    if top_k <= 0 and min_p <= 0.0:
        return _filter_top_p(probs, top_p)
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    if 0 < top_k < sorted_probs.shape[-1]:
        sorted_probs[:, top_k:] = 0.0
        sorted_probs = sorted_probs / sorted_probs.sum(dim=-1, keepdim=True)
    if top_p < 1.0:
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(before >= top_p, 0.0)
    if min_p > 0.0:
        sorted_probs = sorted_probs.masked_fill(sorted_probs < min_p * sorted_probs[:, :1], 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(dim=-1, keepdim=True)


@dataclass
class Choice:
    """One decoding step of a batch: token [B], its behaviour logprob [B], the entropy of the
    full tempered distribution [B] (when asked), the `top_n` most likely tokens of the
    sampling distribution and their logprobs [B, N] (when asked)."""

    token: torch.Tensor
    logprob: torch.Tensor
    entropy: torch.Tensor | None = None
    top_ids: torch.Tensor | None = None
    top_logprobs: torch.Tensor | None = None


def choose(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None,
           top_n: int = 0) -> Choice:
    """Sample one token per row from last-position logits [B, V]."""
    logits = logits.float()
    want_entropy = params.want_entropy
    if params.temperature <= 0.0:
        logp = torch.log_softmax(logits, dim=-1)
        token = torch.argmax(logits, dim=-1)
        entropy = -(logp.exp() * logp).nan_to_num().sum(-1) if want_entropy else None
        return _choice(token, logp, entropy, top_n)
    logp = torch.log_softmax(logits / params.temperature, dim=-1)
    probs = logp.exp()
    entropy = -(probs * logp).nan_to_num().sum(-1) if want_entropy else None
    if params.top_p < 1.0 or params.top_k > 0 or params.min_p > 0.0:
        probs = _truncate(probs, params.top_k, params.top_p, params.min_p)
        token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        chosen = probs.gather(-1, token[:, None]).squeeze(-1).clamp_min(1e-12).log()
        choice = _choice(token, probs.log() if top_n else logp, entropy, top_n)
        choice.logprob = chosen
        return choice
    token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return _choice(token, logp, entropy, top_n)


def _choice(token: torch.Tensor, logp: torch.Tensor, entropy: torch.Tensor | None, top_n: int) -> Choice:
    choice = Choice(token, logp.gather(-1, token[:, None]).squeeze(-1), entropy)
    if top_n > 0:
        values, ids = torch.topk(logp, min(top_n, logp.shape[-1]), dim=-1)
        choice.top_ids, choice.top_logprobs = ids, values
    return choice


@dataclass
class Segment:
    """Rows sampled alike: `n` completions of each prompt, one generator. `top_n` asks for the
    most likely alternatives at each position (`Completion` does not carry them; `observe`
    receives them)."""

    prompts: Sequence[Sequence[int]]
    n: int
    params: SamplingParams
    generator: torch.Generator | None = None
    top_n: int = 0

    @property
    def rows(self) -> int:
        return len(self.prompts) * self.n


#: Called after every decoding step with the step's choice per segment (rows of finished
#: sequences included); returns the global row indices that must stop now (a stop string).
Observer = Callable[[list[Choice]], set[int]]


def generate(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    num_samples: int,
    params: SamplingParams,
    eos_ids: Sequence[int],
    pad_id: int,
    generator: torch.Generator | None = None,
    *,
    use_cache: bool = True,
    stats: SampleStats | None = None,
) -> list[list[Completion]]:
    """`num_samples` completions for each prompt (outer list: prompts, inner: samples)."""
    if not prompts:
        return []
    rows = decode(model, [Segment(prompts, num_samples, params, generator)], eos_ids, pad_id,
                  use_cache=use_cache, stats=stats)[0]
    return [rows[p * num_samples:(p + 1) * num_samples] for p in range(len(prompts))]


@torch.inference_mode()
def decode(
    model: torch.nn.Module,
    segments: Sequence[Segment],
    eos_ids: Sequence[int],
    pad_id: int,
    *,
    use_cache: bool = True,
    stats: SampleStats | None = None,
    observe: Observer | None = None,
) -> list[list[Completion]]:
    """Every segment's completions, rows prompt-major (prompt p, sample s at p * n + s)."""
    device = next(model.parameters()).device
    stats = stats if stats is not None else SampleStats()
    stats.calls += 1
    t0 = time.perf_counter()
    prompts = [p for seg in segments for p in seg.prompts]
    repeats = [seg.n for seg in segments for _ in seg.prompts]
    bounds: list[tuple[int, int]] = []
    for seg in segments:
        start = bounds[-1][1] if bounds else 0
        bounds.append((start, start + seg.rows))
    rows = bounds[-1][1]
    uniform = len(set(repeats)) == 1
    expand = torch.repeat_interleave(torch.arange(len(prompts), device=device),
                                     torch.tensor(repeats, device=device))
    ids, mask = left_pad(prompts, pad_id, device)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    # Prompts of one length need no mask: the fused causal attention path is exact and faster.
    padded = bool((mask == 0).any())
    if use_cache:
        out = model(input_ids=ids, attention_mask=mask if padded else None, position_ids=positions,
                    use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        logits = out.logits[:, -1, :]
        if rows > len(prompts):
            if uniform:
                cache.batch_repeat_interleave(repeats[0])
            else:
                cache.batch_select_indices(expand)
            logits = logits[expand]
        mask = mask[expand]
        next_pos = positions[expand][:, -1:] + 1
    else:
        cache = None
        ids, mask = ids[expand], mask[expand]
        out = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp_min(0),
                    use_cache=False, logits_to_keep=1)
        logits = out.logits[:, -1, :]
    stats.prefill_s += time.perf_counter() - t0
    stats.prompt_tokens += sum(len(p) for p in prompts)
    t1 = time.perf_counter()

    limits = torch.tensor([seg.params.max_tokens for seg in segments for _ in range(seg.rows)], device=device)
    eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long, device=device)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    stopped = torch.zeros(rows, dtype=torch.bool, device=device)  # by EOS or a stop string
    length = torch.zeros(rows, dtype=torch.long, device=device)
    tokens: list[torch.Tensor] = []
    logprobs: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []
    want_entropy = any(seg.params.want_entropy for seg in segments)
    ones = torch.ones((rows, 1), dtype=mask.dtype, device=device)
    for step in range(int(limits.max())):
        choices = [choose(logits[a:b], seg.params, seg.generator, seg.top_n)
                   for seg, (a, b) in zip(segments, bounds, strict=True)]
        token = _cat([c.token for c in choices])
        logp = _cat([c.logprob for c in choices])
        token = torch.where(finished, torch.full_like(token, pad_id), token)
        tokens.append(token)
        logprobs.append(torch.where(finished, torch.zeros_like(logp), logp))
        if want_entropy:
            entropies.append(_cat([c.entropy if c.entropy is not None else torch.zeros_like(c.logprob)
                                   for c in choices]))
        hit = torch.isin(token, eos) & ~finished
        if observe is not None:
            for c, t in zip(choices, torch.split(token, [b - a for a, b in bounds]), strict=True):
                c.token = t
            requested = observe(choices)
            if requested:
                hit = hit | (torch.isin(torch.arange(rows, device=device), torch.tensor(sorted(requested),
                                                                                       device=device)) & ~finished)
        stopped = stopped | hit
        now = finished | hit | (limits <= step + 1)
        length = torch.where(now & ~finished, torch.full_like(length, step + 1), length)
        finished = now
        if bool(finished.all()):
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
    stop_list = stopped.cpu().tolist()
    length_list = length.cpu().tolist()
    results: list[list[Completion]] = []
    for seg, (a, b) in zip(segments, bounds, strict=True):
        group = []
        for r in range(a, b):
            n = length_list[r]
            stats.generated_tokens += n
            group.append(Completion(token_ids=tok[r][:n], logprobs=lps[r][:n],
                                    finish_reason="stop" if stop_list[r] else "length",
                                    entropies=ents[r][:n] if ents is not None and seg.params.want_entropy else None))
        results.append(group)
    return results


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts)
