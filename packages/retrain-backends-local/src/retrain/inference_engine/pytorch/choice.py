"""One token per row from last-position logits: temperature, top-k, top-p, min-p.

The returned logprob of a token is its log-probability under the distribution it was drawn
from: softmax(logits / T), truncated by top-k, then the top-p nucleus of the renormalised
rest, then min-p (relative to the most likely token, which every filter keeps), renormalised
(`retrain.types.SamplingParams`). At T = 1 with no truncation it equals the training-side
logprob of the same token; with top_k = 1 it is 0 (the draw is certain).

A row draws with one uniform `u` in [0, 1): the token whose cumulative-probability bucket
holds `u` times the row's total mass (inverse CDF). One number per row instead of one per
vocabulary entry (what `torch.multinomial` spends) makes the draw a few passes over the
logits; and because the caller hands `u` in, a row's draw is fixed by its own stream whatever
else shares the batch. The cumulative sum is fp32: a token is drawn with its probability to
within about 2^-24 of the row's mass.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from retrain.types import SamplingParams


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


def truncates(params: SamplingParams) -> bool:
    return params.top_p < 1.0 or params.top_k > 0 or params.min_p > 0.0


def choose(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None,
           top_n: int = 0, uniform: torch.Tensor | None = None) -> Choice:
    """Sample one token per row from logits [B, V]; `uniform` [B] are the rows' draws (taken
    from `generator` when not given; greedy decoding uses none)."""
    z = logits.float()
    if params.temperature <= 0.0:
        logp = torch.log_softmax(z, dim=-1)
        token = torch.argmax(z, dim=-1)
        entropy = _entropy(logp) if params.want_entropy else None
        return _with_top(Choice(token, logp.gather(-1, token[:, None]).squeeze(-1), entropy), logp, top_n)
    if params.temperature != 1.0:
        z = z / params.temperature
    if uniform is None:
        uniform = torch.rand(z.shape[0], generator=generator, device=z.device)
    if truncates(params):
        lse = torch.logsumexp(z, dim=-1, keepdim=True)
        entropy = _entropy(z - lse) if params.want_entropy else None
        return _truncated(z, lse, params, uniform, entropy, top_n)
    # one pass each: max, exp(z - max), cumulative sum; log Σ exp(z - max) is the sum's end
    top = z.amax(dim=-1, keepdim=True)
    mass = (z - top).exp_()
    index, cdf = _draw(mass, uniform)
    lse = top + cdf[:, -1:].log()
    choice = Choice(index, (z.gather(-1, index[:, None]) - lse).squeeze(-1))
    if params.want_entropy or top_n > 0:
        logp = z - lse
        choice.entropy = _entropy(logp) if params.want_entropy else None
        _with_top(choice, logp, top_n)
    return choice


def truncate_sorted(probs: torch.Tensor, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """Probabilities [B, V] sorted in descending order, truncated: top-k (renormalised), then
    the top-p nucleus of the rest, then min-p relative to the most likely; a dropped entry is
    0 and the kept ones are not renormalised after top-k. Each filter keeps a prefix. The one
    rule of the sampler and of the trainer that scores its tokens (local.truncation); it may
    write into `probs`."""
    if 0 < top_k < probs.shape[-1]:
        probs[:, top_k:] = 0.0
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if top_p < 1.0:
        before = torch.cumsum(probs, dim=-1) - probs
        probs = probs.masked_fill(before >= top_p, 0.0)
    if min_p > 0.0:
        probs = probs.masked_fill(probs < min_p * probs[:, :1], 0.0)
    return probs


def _truncated(z: torch.Tensor, lse: torch.Tensor, params: SamplingParams, uniform: torch.Tensor,
               entropy: torch.Tensor | None, top_n: int) -> Choice:
    """The filters act on probabilities sorted in descending order; the draw happens there and
    the sorted index maps back to the token."""
    sorted_z, order = torch.sort(z, dim=-1, descending=True)
    kept = truncate_sorted((sorted_z - lse).exp_(), params.top_k, params.top_p, params.min_p)
    index, cdf = _draw(kept, uniform)
    total = cdf[:, -1:]
    token = order.gather(-1, index[:, None]).squeeze(-1)
    logprob = (kept.gather(-1, index[:, None]) / total).clamp_min(1e-12).log().squeeze(-1)
    choice = Choice(token, logprob, entropy)
    if top_n > 0:
        n = min(top_n, kept.shape[-1])
        choice.top_ids = order[:, :n]
        choice.top_logprobs = (kept[:, :n] / total).log()
    return choice


def _draw(mass: torch.Tensor, uniform: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the index whose bucket of the cumulative mass [B, V] holds uniform x total, the
    cumulative mass). The point is kept below the total (u x total can round up to it), so
    the bucket is never empty: never a zero-mass index."""
    cdf = torch.cumsum(mass, dim=-1)
    total = cdf[:, -1:]
    point = torch.minimum(uniform[:, None].to(cdf.dtype) * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, point, right=True).squeeze(-1), cdf


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    return -(logp.exp() * logp).nan_to_num().sum(-1)


def _with_top(choice: Choice, logp: torch.Tensor, top_n: int) -> Choice:
    if top_n > 0:
        values, ids = torch.topk(logp, min(top_n, logp.shape[-1]), dim=-1)
        choice.top_ids, choice.top_logprobs = ids, values
    return choice
