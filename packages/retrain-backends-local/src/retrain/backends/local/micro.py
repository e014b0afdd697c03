"""The micro-batches of one update: which rows run together, packed or padded, and the step's
token accounting.

With a token budget the rows are binned longest first (first fit, decreasing), so the
micro-batches come out about even: packed, a bin holds whole prompt families (the rows that
share a prompt, so it is computed once) and costs the tokens it runs; padded, a bin holds rows
of similar length and costs rows x its widest row (the reference's padded-token budget). A
family larger than the budget is split, each part repeating the prompt; a row longer than the
budget goes alone. Without a budget the rows run together, or `train_microbatch_size` at a
time in their order. Every weight of the loss is fixed for the whole batch before any
micro-batch runs (retrain.backends.local.loss.token_weights), so how rows are grouped changes
only the order of floating-point sums, never the update.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from retrain.backends.local.batch import Batch
from retrain.backends.local.packing import pack


@dataclass(frozen=True)
class Layout:
    budget: int = 0  # tokens one micro-batch runs over; 0: no cap
    max_rows: int = 0  # rows of one micro-batch; 0: no cap
    packed: bool = False  # padding-free rows, shared prefixes once (retrain.backends.local.packing)


def plan(batch: Batch, layout: Layout) -> list[list[int]]:
    """The rows (indices into `batch`) of each micro-batch, each list ascending."""
    n = batch.rows
    if n == 0:
        return []
    if layout.budget <= 0:
        size = layout.max_rows if 0 < layout.max_rows < n else n
        return [list(range(i, min(i + size, n))) for i in range(0, n, size)]
    if layout.packed:
        return first_fit(families(batch), batch.lengths, layout.budget, layout.max_rows)
    return padded_bins(batch.lengths, layout.budget, layout.max_rows)


def families(batch: Batch) -> list[tuple[int, list[int]]]:
    """(prompt length, rows) of each group of rows with the same prompt (the tokens up to
    their first sampled one), in order of first appearance."""
    groups: dict[tuple[int, ...], list[int]] = {}
    first = _first_action(batch)
    for r, tokens in enumerate(batch.tokens):
        groups.setdefault(tuple(tokens[: first[r] + 1]), []).append(r)
    return [(len(prompt), rows) for prompt, rows in groups.items()]


def _first_action(batch: Batch) -> list[int]:
    """Each row's first position whose next token is sampled (its length when none is)."""
    any_action = batch.action.any(dim=1)
    first = batch.action.to(torch.int8).argmax(dim=1)
    lengths = torch.tensor(batch.lengths, device=first.device)
    return torch.where(any_action, first, lengths).tolist()


def first_fit(groups: list[tuple[int, list[int]]], lengths: Sequence[int], budget: int,
              max_rows: int) -> list[list[int]]:
    """First-fit decreasing of prompt groups into bins of `budget` tokens and at most
    `max_rows` rows. A group costs its prompt once plus each row's own tokens; one that fits
    no bin is cut into parts that do, each repeating the prompt (a row alone always fits)."""
    pieces: list[tuple[int, list[int]]] = []
    for prompt, rows in groups:
        cost, part = prompt, list[int]()
        for r in rows:
            own = lengths[r] - prompt
            if part and (cost + own > budget or (max_rows > 0 and len(part) >= max_rows)):
                pieces.append((cost, part))
                cost, part = prompt, []
            cost, part = cost + own, [*part, r]
        pieces.append((cost, part))
    pieces.sort(key=lambda p: (-p[0], p[1][0]))
    bins: list[tuple[int, list[int]]] = []
    for cost, rows in pieces:
        for i, (used, members) in enumerate(bins):
            if used + cost <= budget and (max_rows <= 0 or len(members) + len(rows) <= max_rows):
                bins[i] = (used + cost, members + rows)
                break
        else:
            bins.append((cost, list(rows)))
    return [sorted(members) for _, members in bins]


def padded_bins(lengths: Sequence[int], budget: int, max_rows: int) -> list[list[int]]:
    """Rows longest first, each bin as many as fit rows x its widest (its first) row <= budget."""
    order = sorted(range(len(lengths)), key=lambda r: (-lengths[r], r))
    bins: list[list[int]] = []
    for r in order:
        current = bins[-1] if bins else None
        if current is not None and (len(current) + 1) * lengths[current[0]] <= budget and (
                max_rows <= 0 or len(current) < max_rows):
            current.append(r)
        else:
            bins.append([r])
    return [sorted(b) for b in bins]


def micro_batches(batch: Batch, layout: Layout) -> list[Batch]:
    """`plan`'s micro-batches, each with its packed layout when `layout.packed`."""
    parts = plan(batch, layout)
    out = []
    for rows in parts:
        mb = batch if len(parts) == 1 and batch.origin is None else batch.take(rows)
        if layout.packed:
            routes = mb.routes.numpy() if mb.routes is not None else None
            mb.packed = pack(mb.tokens, routes=routes).to(batch.input_ids.device)
        out.append(mb)
    return out


def token_metrics(batch: Batch, parts: Sequence[Batch]) -> dict[str, float | int]:
    """The step's token accounting: `train/tokens` (the rows' tokens), `train/forward_tokens`
    (what the layers ran over: a packed stream, or rows x width), the share of those that were
    padding, the share of the rows' tokens computed once for several rows (shared prefixes),
    the micro-batches and their mean forward tokens."""
    tokens = sum(batch.lengths)
    forward = sum(p.packed.tokens if p.packed is not None else p.rows * p.input_ids.shape[1] for p in parts)
    padding = sum(0 if p.packed is not None else p.rows * p.input_ids.shape[1] - sum(p.lengths) for p in parts)
    shared = sum(sum(p.lengths) - p.packed.tokens for p in parts if p.packed is not None)
    count = max(len(parts), 1)
    return {"train/tokens": tokens, "train/forward_tokens": forward,
            "train/padding_fraction": round(padding / max(forward, 1), 6),
            "train/shared_fraction": round(shared / max(tokens, 1), 6),
            "train/micro_batches": len(parts), "train/tokens_per_micro_batch": round(forward / count, 1)}


def scatter(batch: Batch, parts: Sequence[Batch], values: Sequence[torch.Tensor]) -> torch.Tensor:
    """[N] values of the action tokens of every part, in `batch`'s row-major order of
    `batch.action` (parts hold rows in another order)."""
    full = torch.zeros(batch.action.shape, dtype=values[0].dtype if values else torch.float32,
                       device=batch.action.device)
    for part, v in zip(parts, values, strict=True):
        rows = part.row_indices()
        block = torch.zeros(part.action.shape, dtype=full.dtype, device=full.device)
        block[part.action] = v
        full[rows, : block.shape[1]] = block
    return full[batch.action]


def pick(batch_values: torch.Tensor, part: Batch) -> torch.Tensor:
    """`batch_values` [B, L-1] of the step's batch, at `part`'s action tokens (row-major in
    `part`)."""
    return batch_values[part.row_indices(), : part.action.shape[1]][part.action]
