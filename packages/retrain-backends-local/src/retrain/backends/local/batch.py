"""Datums to padded tensors, and micro-batch slicing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from retrain.backends.local.loss import token_weights
from retrain.types import Datum


@dataclass
class Batch:
    """Right-padded rows. Shifted views ([:, 1:]) align old logprobs and advantages with the
    token each position predicts; `action` marks the sampled tokens (the datums' loss masks)
    and `weight` is each position's weight in the update's loss (loss.token_weights), fixed
    for the whole batch so that micro-batches sum to the full-batch loss."""

    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    old_logprobs: torch.Tensor  # [B, L-1]
    advantages: torch.Tensor  # [B, L-1]
    action: torch.Tensor  # [B, L-1] bool
    weight: torch.Tensor  # [B, L-1]
    echo: torch.Tensor | None = None  # [B, L-1] ECHO weights (retrain.types.Datum.echo_weights), None: no ECHO

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def action_tokens(self) -> int:
        return int(self.action.sum())

    def slice(self, start: int, stop: int) -> Batch:
        b = Batch(self.input_ids[start:stop], self.attention_mask[start:stop], self.old_logprobs[start:stop],
                  self.advantages[start:stop], self.action[start:stop], self.weight[start:stop],
                  self.echo[start:stop] if self.echo is not None else None)
        width = int(b.attention_mask.sum(-1).max()) if b.rows else 1
        if width < b.input_ids.shape[1]:
            b = Batch(b.input_ids[:, :width], b.attention_mask[:, :width], b.old_logprobs[:, : width - 1],
                      b.advantages[:, : width - 1], b.action[:, : width - 1], b.weight[:, : width - 1],
                      b.echo[:, : width - 1] if b.echo is not None else None)
        return b


def collate(datums: Sequence[Datum], pad_id: int, device: torch.device, *, aggregation: str = "token_mean",
            max_tokens: int = 0) -> Batch:
    width = max(2, max(len(d.tokens) for d in datums))
    rows = len(datums)
    ids = torch.full((rows, width), pad_id, dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    old = torch.zeros((rows, width), dtype=torch.float32)
    adv = torch.zeros((rows, width), dtype=torch.float32)
    sampled = torch.zeros((rows, width), dtype=torch.bool)
    echo = torch.zeros((rows, width), dtype=torch.float32) if any(d.echo_weights for d in datums) else None
    for i, d in enumerate(datums):
        n = len(d.tokens)
        lengths = (len(d.logprobs), len(d.advantages)) + (() if d.mask is None else (len(d.mask),))
        if any(k != n for k in lengths):
            raise ValueError(f"datum {i}: tokens, logprobs, advantages (and mask) differ in length "
                             f"({n}, {', '.join(map(str, lengths))})")
        ids[i, :n] = torch.tensor(d.tokens, dtype=torch.long)
        mask[i, :n] = 1
        old[i, :n] = torch.tensor(d.logprobs, dtype=torch.float32)
        adv[i, :n] = torch.tensor(d.advantages, dtype=torch.float32)
        sampled[i, :n] = torch.tensor(d.loss_mask(), dtype=torch.bool)
        if echo is not None and d.echo_weights:
            if len(d.echo_weights) != n:
                raise ValueError(f"datum {i}: {len(d.echo_weights)} ECHO weights for {n} tokens")
            echo[i, :n] = torch.tensor(d.echo_weights, dtype=torch.float32)
    action = sampled[:, 1:] & mask[:, 1:].bool()
    weight = token_weights(aggregation, action, max_tokens)
    return Batch(ids.to(device), mask.to(device), old[:, 1:].to(device), adv[:, 1:].to(device), action.to(device),
                 weight.to(device), echo[:, 1:].to(device) if echo is not None else None)


def micro_batches(batch: Batch, size: int) -> list[Batch]:
    if size <= 0 or size >= batch.rows:
        return [batch]
    return [batch.slice(i, min(i + size, batch.rows)) for i in range(0, batch.rows, size)]


def token_budget_micro_batches(batch: Batch, budget: int, max_rows: int = 0) -> list[Batch]:
    """Consecutive rows, as many as fit `budget` padded tokens (rows x the widest row's real
    length; always at least one row) and at most `max_rows` rows (0: no cap). A long row goes
    alone; short rows share one forward."""
    lengths = batch.attention_mask.sum(-1).tolist()
    out: list[Batch] = []
    start, widest = 0, 0
    for i, length in enumerate(lengths):
        wider = max(widest, int(length))
        rows = i - start + 1
        if i > start and (rows * wider > budget or (max_rows > 0 and rows > max_rows)):
            out.append(batch.slice(start, i))
            start, wider = i, int(length)
        widest = wider
    if batch.rows:
        out.append(batch.slice(start, batch.rows))
    return out
