"""Datums to padded tensors, and taking rows of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np
import torch

from retrain.backends.local.loss import token_weights
from retrain.backends.local.packing import Packed
from retrain.types import Datum


@dataclass
class Batch:
    """Right-padded rows. Shifted views ([:, 1:]) align old logprobs and advantages with the
    token each position predicts; `action` marks the sampled tokens (the datums' loss masks)
    and `weight` is each position's weight in the update's loss (loss.token_weights), fixed
    for the whole batch so that micro-batches sum to the full-batch loss.

    A micro-batch is a Batch of some of the step's rows (`take`, `slice`): `origin` holds
    their indices in the step's batch, `packed` their padding-free layout when it runs packed
    (retrain.backends.local.micro)."""

    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    old_logprobs: torch.Tensor  # [B, L-1]
    advantages: torch.Tensor  # [B, L-1]
    action: torch.Tensor  # [B, L-1] bool
    weight: torch.Tensor  # [B, L-1]
    echo: torch.Tensor | None = None  # [B, L-1] ECHO weights (retrain.types.Datum.echo_weights), None: no ECHO
    tokens: list[list[int]] = field(default_factory=list)  # each row's tokens, on the host
    origin: torch.Tensor | None = None  # [B] the rows' indices in the step's batch (None: it is the step's)
    packed: Packed | None = None
    #: [B, L, layers, k] on the host: the sampler's expert ids of each position (routing replay,
    #: retrain.backends.local.replay), -1 where a position has none; None: no datum has any
    routes: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def action_tokens(self) -> int:
        return int(self.action.sum())

    @property
    def lengths(self) -> list[int]:
        return [len(t) for t in self.tokens]

    def row_indices(self) -> torch.Tensor:
        return self.origin if self.origin is not None else torch.arange(self.rows, device=self.input_ids.device)

    def take(self, rows: Sequence[int]) -> Batch:
        """These rows (in this order), trimmed to the widest of them."""
        index = torch.tensor(list(rows), dtype=torch.long, device=self.input_ids.device)
        width = max(2, max((len(self.tokens[r]) for r in rows), default=2))
        def cut(t: torch.Tensor, shifted: bool = True) -> torch.Tensor:
            return t.index_select(0, index)[:, : width - shifted]

        routes = None
        if self.routes is not None:
            routes = self.routes.index_select(0, index.to(self.routes.device))[:, :width]
        return Batch(cut(self.input_ids, False), cut(self.attention_mask, False), cut(self.old_logprobs),
                     cut(self.advantages), cut(self.action), cut(self.weight),
                     echo=cut(self.echo) if self.echo is not None else None, tokens=[self.tokens[r] for r in rows],
                     origin=self.row_indices().index_select(0, index), routes=routes)

    def slice(self, start: int, stop: int) -> Batch:
        return self.take(range(start, stop))


def collate(datums: Sequence[Datum], pad_id: int, device: torch.device, *, aggregation: str = "token_mean",
            max_tokens: int = 0) -> Batch:
    width = max(2, max(len(d.tokens) for d in datums))
    rows = len(datums)
    ids = np.full((rows, width), pad_id, dtype=np.int64)
    mask = np.zeros((rows, width), dtype=np.int64)
    old = np.zeros((rows, width), dtype=np.float32)
    adv = np.zeros((rows, width), dtype=np.float32)
    sampled = np.zeros((rows, width), dtype=bool)
    echo = np.zeros((rows, width), dtype=np.float32) if any(d.echo_weights for d in datums) else None
    for i, d in enumerate(datums):
        n = len(d.tokens)
        lengths = (len(d.logprobs), len(d.advantages)) + (() if d.mask is None else (len(d.mask),))
        if any(k != n for k in lengths):
            raise ValueError(f"datum {i}: tokens, logprobs, advantages (and mask) differ in length "
                             f"({n}, {', '.join(map(str, lengths))})")
        ids[i, :n] = d.tokens
        mask[i, :n] = 1
        old[i, :n] = d.logprobs
        adv[i, :n] = d.advantages
        sampled[i, :n] = d.loss_mask()
        if echo is not None and d.echo_weights:
            if len(d.echo_weights) != n:
                raise ValueError(f"datum {i}: {len(d.echo_weights)} ECHO weights for {n} tokens")
            echo[i, :n] = d.echo_weights
    action = torch.from_numpy(sampled[:, 1:] & mask[:, 1:].astype(bool))
    weight = token_weights(aggregation, action, max_tokens)

    def put(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).to(device)

    return Batch(put(ids), put(mask), put(old[:, 1:]), put(adv[:, 1:]), action.to(device), weight.to(device),
                 put(echo[:, 1:]) if echo is not None else None, tokens=[list(d.tokens) for d in datums],
                 routes=routes_grid(datums, width))


def routes_grid(datums: Sequence[Datum], width: int) -> torch.Tensor | None:
    """[B, width, layers, k] int16: each datum's recorded routes at its first positions, -1
    elsewhere; None when no datum has any."""
    recorded = [(i, d.routes.array()) for i, d in enumerate(datums) if d.routes is not None]
    if not recorded:
        return None
    shapes = {a.shape[1:] for _, a in recorded}
    if len(shapes) != 1:
        raise ValueError(f"datums' routes differ in (layers, k): {sorted(shapes)}")
    grid = np.full((len(datums), width, *shapes.pop()), -1, dtype=np.int16)
    for i, a in recorded:
        if a.shape[0] > len(datums[i].tokens):
            raise ValueError(f"datum {i}: routes for {a.shape[0]} positions and {len(datums[i].tokens)} tokens")
        grid[i, : a.shape[0]] = a
    return torch.from_numpy(grid)


def crop_context(datums: Sequence[Datum], context_tokens: int) -> tuple[Sequence[Datum], dict[str, int]]:
    """`train_supervised_context_tokens`: each datum keeps at most `context_tokens` tokens
    before its first trained token (in its loss mask, or with an ECHO weight); what comes
    earlier is dropped, and the row's positions restart at its new first token. No trained
    token is ever dropped, so every loss denominator is unchanged. 0 keeps every token."""
    if context_tokens <= 0:
        return datums, {}
    out: list[Datum] = []
    cropped = removed = widest = widest_after = 0
    for d in datums:
        trained = d.loss_mask()
        echo = d.echo_weights or [0.0] * len(d.tokens)
        first = next((i for i in range(1, len(d.tokens)) if trained[i] or echo[i] > 0), 0)
        start = max(0, first - context_tokens)
        widest = max(widest, len(d.tokens))
        if start:
            d = msgspec.structs.replace(
                d, tokens=d.tokens[start:], logprobs=d.logprobs[start:], advantages=d.advantages[start:],
                mask=d.mask[start:] if d.mask is not None else None,
                echo_weights=d.echo_weights[start:] if d.echo_weights else d.echo_weights,
                routes=d.routes.cut(start) if d.routes is not None else None)
            cropped, removed = cropped + 1, removed + start
        widest_after = max(widest_after, len(d.tokens))
        out.append(d)
    return out, {"local_train_context_rows_cropped": cropped, "local_train_context_tokens_removed": removed,
                 "local_train_context_original_max_tokens": widest,
                 "local_train_context_cropped_max_tokens": widest_after}
