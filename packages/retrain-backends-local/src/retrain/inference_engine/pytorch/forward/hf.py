"""The decode loop's forward on any transformers causal LM: its own forward with the cache it
builds (or, with `use_cache` off, the whole sequence again at every step). The path for
architectures the lean forward does not run, and the reference the lean one is tested on."""

from __future__ import annotations

import torch

from retrain.inference_engine.pytorch.forward.rows import select_rows, unselectable


class HFForward:
    def __init__(self, model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, expand: torch.Tensor,
                 *, use_cache: bool, cache: object | None = None) -> None:
        """ids, mask [prompts, width] left-padded; expand [rows]: the prompt of each row. Each
        prompt is prefilled once and its cache repeated for its rows (`forward.rows`); a cache
        whose rows cannot be selected (a quantised one) is prefilled for every row instead and
        never compacted. Position ids come from the mask, so padding never shifts RoPE
        positions. `cache`: the (empty) cache the prefill fills, default the one the model
        builds."""
        self.model, self.use_cache = model, use_cache
        rows, prompts = int(expand.numel()), int(ids.shape[0])
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        # prompts of one length need no mask: the fused causal attention path is exact and faster
        self.padded = bool((mask == 0).any())
        self.compactable = True  # rows can be dropped from the cache
        if use_cache:
            self.compactable = cache is None or unselectable(cache) is None
            logits = self._prefill(ids, mask, positions, cache) if self.compactable else None
            if logits is not None and unselectable(self.cache) is not None:
                self.compactable, logits = False, None  # a cache the model built: built again below
            if logits is None:
                logits = self._prefill(ids[expand], mask[expand], positions[expand], cache)
            elif rows > prompts:
                select_rows(self.cache, expand, prompts)
                logits = logits[expand]
            self.mask = mask[expand]
            self.next_pos = positions[expand][:, -1:] + 1
        else:
            self.ids, self.mask = ids[expand], mask[expand]
            logits = self._full()
        self.n = rows
        self._first: torch.Tensor | None = logits

    def first_logits(self) -> torch.Tensor:
        logits, self._first = self._first, None
        assert logits is not None
        return logits

    def next_logits(self, token: torch.Tensor) -> torch.Tensor:
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.n, 1))], dim=1)
        if not self.use_cache:
            self.ids = torch.cat([self.ids, token[:, None]], dim=1)
            return self._full()
        out = self.model(input_ids=token[:, None], attention_mask=self.mask if self.padded else None,
                         position_ids=self.next_pos, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        self.cache = out.past_key_values
        self.next_pos = self.next_pos + 1
        return out.logits[:, -1, :]

    def _prefill(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                 cache: object | None) -> torch.Tensor:
        """The last position's logits; the cache it filled is kept."""
        out = self.model(input_ids=ids, attention_mask=mask if self.padded else None, position_ids=positions,
                         past_key_values=cache, use_cache=True, logits_to_keep=1)
        self.cache = out.past_key_values
        return out.logits[:, -1, :]

    def compact(self, keep: torch.Tensor) -> None:
        assert self.compactable, "a quantised cache keeps every row"
        self.mask = self.mask[keep]
        if self.use_cache:
            select_rows(self.cache, keep, self.n)
            self.next_pos = self.next_pos[keep]
        else:
            self.ids = self.ids[keep]
        self.n = int(keep.numel())

    def _full(self) -> torch.Tensor:
        out = self.model(input_ids=self.ids, attention_mask=self.mask,
                         position_ids=(self.mask.cumsum(-1) - 1).clamp_min(0), use_cache=False, logits_to_keep=1)
        return out.logits[:, -1, :]
