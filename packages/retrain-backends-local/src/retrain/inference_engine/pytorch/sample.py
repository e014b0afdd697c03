"""Batched sampling in PyTorch, for the whole step at once.

All prompts x group members decode in one loop: each prompt is prefilled once and its cache
copied to its rows, then one token per row per iteration. A row stops after its first EOS
(the EOS is part of the completion), a stop string its observer reports, or `max_tokens`.

Decisions:
1. The model runs in eval mode with its cache whatever mode training left it in (gradient
   checkpointing turns the cache off in training mode; dropout must not touch sampling);
   every module's mode is restored afterwards.
2. The forward is retrain's own (`forward.lean`: a preallocated KV cache, one straight run of
   tensor ops per step, captured as a CUDA graph on a GPU) for the llama family, and
   transformers' (`forward.hf`) for anything else or when asked (`decoder`).
3. Rows that finish are compacted away once a quarter of the batch has; with CUDA graphs
   once half has, to a multiple of 8 (each new size costs a capture, and a GPU step costs
   little less with fewer rows). Until then they decode pad tokens, dropped from the result.
4. Every row draws one uniform per step from its row set's generator, whether it is still
   running or not (`choice.choose`): a row's tokens depend on its own stream only, never on
   which other rows share the batch or when they were compacted.
5. With `record_routes` (a mixture-of-experts model, routing replay) every router's choice is
   kept (`routes.RouteLog`): the prompts' from their prefill, each row's from the step that
   fed its token; a completion carries them for its prompt and its tokens but the last
   (`Completion.routes`), as vLLM's `routed_experts` output does.

`decode` samples several *row sets* in one batch: a row set is the rows of one request (n
completions of each of its prompts) with its own parameters and random generator. The
in-process engine samples one row set per step; `retrain serve` one per HTTP request, so a
request with a seed draws exactly what the in-process engine draws with that seed.
"""

from __future__ import annotations

import bisect
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from retrain.inference_engine.pytorch.choice import Choice, choose
from retrain.inference_engine.pytorch.device import active_autocast_dtype
from retrain.inference_engine.pytorch.forward.hf import HFForward
from retrain.inference_engine.pytorch.forward.lean import LeanForward
from retrain.inference_engine.pytorch.forward.linear import Unsupported
from retrain.inference_engine.pytorch.routes import RouteLog
from retrain.models import routing
from retrain.models.routing import moe_shape
from retrain.types import Completion, Routes, SamplingParams

DECODERS = ("auto", "retrain", "transformers")


@dataclass
class SampleStats:
    prefill_s: float = 0.0
    decode_s: float = 0.0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    calls: int = 0
    decode_steps: int = 0
    row_steps: int = 0  # rows decoded, summed over steps (finished rows included until compacted)
    compactions: int = 0
    graph_captures: int = 0
    graph_replays: int = 0
    decoder: str = ""  # "retrain" or "transformers" (the last call's)
    decoder_note: str = ""  # why the last call did not run retrain's forward, or why graphs failed
    extra: dict[str, float] = field(default_factory=dict)


def engine_metrics(s: SampleStats) -> dict[str, float | int | str]:
    """The step's `engine_*` metrics from its stats (metrics.jsonl; docs/backends.md)."""
    out: dict[str, float | int | str] = {
        "engine_prompt_prefill_s": round(s.prefill_s, 6),
        "engine_decode_s": round(s.decode_s, 6),
        "engine_prompt_tokens": s.prompt_tokens,
        "engine_generated_tokens": s.generated_tokens,
    }
    if s.calls:
        out.update({
            "engine_decoder": s.decoder,
            "engine_generated_tokens_per_s": round(s.generated_tokens / s.decode_s, 1) if s.decode_s > 0 else 0.0,
            "engine_decode_steps": s.decode_steps,
            "engine_row_steps": s.row_steps,
            "engine_compactions": s.compactions,
            "engine_cuda_graph_captures": s.graph_captures,
            "engine_cuda_graph_replays": s.graph_replays,
        })
        if s.decoder_note:
            out["engine_decoder_note"] = s.decoder_note
    return out


class Forward(Protocol):
    n: int
    compactable: bool  # `compact` may be called (a quantised transformers cache keeps every row)

    def first_logits(self) -> torch.Tensor: ...

    def next_logits(self, token: torch.Tensor) -> torch.Tensor: ...

    def compact(self, keep: torch.Tensor) -> None: ...


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r):] = 1
    return ids.to(device), mask.to(device)


@dataclass
class RowSet:
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


#: Called after every decoding step with the step's choice per row set (one entry per row of
#: the row set, finished rows included); returns the global row indices that must stop now.
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
    decoder: str = "auto",
    cuda_graphs: bool = True,
    record_routes: bool = False,
) -> list[list[Completion]]:
    """`num_samples` completions for each prompt (outer list: prompts, inner: samples)."""
    if not prompts:
        return []
    rows = decode(model, [RowSet(prompts, num_samples, params, generator)], eos_ids, pad_id,
                  use_cache=use_cache, stats=stats, decoder=decoder, cuda_graphs=cuda_graphs,
                  record_routes=record_routes)[0]
    return [rows[p * num_samples:(p + 1) * num_samples] for p in range(len(prompts))]


@torch.inference_mode()
def decode(
    model: torch.nn.Module,
    row_sets: Sequence[RowSet],
    eos_ids: Sequence[int],
    pad_id: int,
    *,
    use_cache: bool = True,
    stats: SampleStats | None = None,
    observe: Observer | None = None,
    decoder: str = "auto",
    cuda_graphs: bool = True,
    record_routes: bool = False,
) -> list[list[Completion]]:
    """Every row set's completions, rows prompt-major (prompt p, sample s at p * n + s)."""
    stats = stats if stats is not None else SampleStats()
    loop = _Loop(model, row_sets, eos_ids, pad_id, stats, observe)
    with eval_mode(model), loop.recording(record_routes):
        return loop.run(use_cache, decoder, cuda_graphs)


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def make_forward(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, expand: torch.Tensor, steps: int,
                 *, use_cache: bool, decoder: str, cuda_graphs: bool, stats: SampleStats) -> Forward:
    """retrain's forward where it runs this model (decoder "auto" or "retrain"), else
    transformers'. "retrain" on a model it cannot run is an error naming why."""
    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {DECODERS}, not {decoder!r}")
    stats.decoder_note = ""
    if decoder != "transformers" and use_cache:
        device = ids.device
        try:
            forward = LeanForward(model, active_autocast_dtype(device), ids, mask, expand, steps,
                                  graphs=cuda_graphs and device.type == "cuda")
        except Unsupported as why:
            if decoder == "retrain":
                raise RuntimeError(f"retrain's decoder cannot run this model: {why} (sample_decoder = "
                                   "\"auto\" falls back to transformers)") from None
            stats.decoder_note = str(why)
        else:
            stats.decoder = "retrain"
            return forward
    elif decoder == "retrain":
        raise RuntimeError("retrain's decoder needs the KV cache (sample_use_cache = true)")
    stats.decoder = "transformers"
    return HFForward(model, ids, mask, expand, use_cache=use_cache)


class _Loop:
    """One `decode` call. Slots are the rows still in the forward's batch, in row order."""

    slot_row: torch.Tensor  # [slots] the row in each slot (set by `_start_rows`, cut by compaction)

    def __init__(self, model: torch.nn.Module, row_sets: Sequence[RowSet], eos_ids: Sequence[int], pad_id: int,
                 stats: SampleStats, observe: Observer | None) -> None:
        self.model, self.row_sets, self.pad, self.stats, self.observe = model, row_sets, pad_id, stats, observe
        self.device = next(model.parameters()).device
        self.prompts = [p for rs in row_sets for p in rs.prompts]
        self.row_bounds: list[tuple[int, int]] = []
        for rs in row_sets:
            start = self.row_bounds[-1][1] if self.row_bounds else 0
            self.row_bounds.append((start, start + rs.rows))
        self.rows = self.row_bounds[-1][1]
        self.steps = max(rs.params.max_tokens for rs in row_sets)
        self.eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long, device=self.device)
        self.want_entropy = any(rs.params.want_entropy for rs in row_sets)
        self.log: RouteLog | None = None

    @contextlib.contextmanager
    def recording(self, on: bool) -> Iterator[None]:
        """Every router's choice kept in `self.log` for the duration (`on`)."""
        if not on:
            yield
            return
        layers, _, k = moe_shape(self.model.config)
        if not k:
            raise RuntimeError("routes are recorded for a mixture-of-experts model, and this one has no routed layer")
        self.log = RouteLog(layers, k, self.rows, self.device)
        with routing.wrapped(self.model, self.log.wrap):
            yield

    def run(self, use_cache: bool, decoder: str, cuda_graphs: bool) -> list[list[Completion]]:
        stats, device = self.stats, self.device
        stats.calls += 1
        forward, graphed, logits = self._prefill(use_cache, decoder, cuda_graphs)
        t1 = time.perf_counter()
        limit, finished, stopped, length = self._start_rows()
        # a CUDA step is queued, not waited for: check for the end (a sync) every few steps
        check_every = 4 if device.type == "cuda" and self.observe is None else 1
        for step in range(self.steps):
            stats.decode_steps += 1
            stats.row_steps += forward.n
            token, logp, entropy, choices = self._choose(logits)
            token = torch.where(finished, self.pad, token)
            self.tokens[self.slot_row, step] = token
            self.logprobs[self.slot_row, step] = torch.where(finished, 0.0, logp)
            if self.entropies is not None and entropy is not None:
                self.entropies[self.slot_row, step] = torch.where(finished, 0.0, entropy)
            hit = torch.isin(token, self.eos) & ~finished
            if self.observe is not None:
                requested = self.observe(self._full_choices(choices, token))
                if requested:
                    asked = torch.tensor(sorted(requested), device=device)
                    hit = hit | (torch.isin(self.slot_row, asked) & ~finished)
            stopped = stopped | hit
            now = finished | hit | (limit <= step + 1)
            length = torch.where(now & ~finished, step + 1, length)
            finished = now
            if step + 1 >= self.steps:
                break
            if (step + 1) % check_every == 0:
                live = int((~finished).sum())
                if live == 0:
                    break
                size = min(forward.n, -(-live // 8) * 8) if graphed else live
                if forward.compactable and size <= (forward.n // 2 if graphed else forward.n * 3 // 4):
                    keep = torch.sort(torch.argsort(finished.to(torch.int8), stable=True)[:size]).values
                    self._flush(length, stopped)
                    forward.compact(keep)
                    self.slot_row, limit = self.slot_row[keep], limit[keep]
                    finished, stopped, length, token = finished[keep], stopped[keep], length[keep], token[keep]
                    self._row_set_slots(compacted=True)
                    stats.compactions += 1
            logits = forward.next_logits(token)
            if self.log is not None:
                self.step_routes[self.slot_row, step] = self.log.last(forward.n)
        self._flush(length, stopped)
        self._count_graphs(forward)
        stats.decode_s += time.perf_counter() - t1
        return self._completions()

    def _prefill(self, use_cache: bool, decoder: str,
                 cuda_graphs: bool) -> tuple[Forward, bool, torch.Tensor]:
        """(the forward, whether it replays CUDA graphs, the first step's logits), timed as prefill."""
        stats, device = self.stats, self.device
        t0 = time.perf_counter()
        repeats = torch.tensor([rs.n for rs in self.row_sets for _ in rs.prompts], device=device)
        expand = torch.repeat_interleave(torch.arange(len(self.prompts), device=device), repeats)
        ids, mask = left_pad(self.prompts, self.pad, device)
        forward = make_forward(self.model, ids, mask, expand, self.steps, use_cache=use_cache, decoder=decoder,
                               cuda_graphs=cuda_graphs, stats=stats)
        graphed = getattr(forward, "graphs", None) is not None
        logits = forward.first_logits()
        if self.log is not None:
            self._prompt_routes(ids.shape[1], expand, lean=isinstance(forward, LeanForward))
        stats.prefill_s += time.perf_counter() - t0
        stats.prompt_tokens += sum(len(p) for p in self.prompts)
        return forward, graphed, logits

    def _prompt_routes(self, width: int, expand: torch.Tensor, *, lean: bool) -> None:
        """The prompts' routes from their prefill: one grid row per prompt, or per row where the
        prefill ran every row; the steps' routes then go to the decoder's fixed buffer."""
        assert self.log is not None
        per_prompt = self.log.listed_tokens() == len(self.prompts) * width
        grid = self.log.grid(width, len(self.prompts) if per_prompt else self.rows)
        self.prompt_grid = grid[expand] if per_prompt else grid  # [rows, width, layers, k]
        self.row_prompt: list[int] = expand.tolist()
        self.step_routes = torch.zeros((self.rows, self.steps, *grid.shape[2:]), dtype=grid.dtype, device=grid.device)
        self.log.fixed = lean

    def _start_rows(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every row in its slot and the result buffers empty; per slot (token limit, finished,
        stopped by EOS or a stop string, length)."""
        rows, device = self.rows, self.device
        self.slot_row = torch.arange(rows, device=device)
        self._row_set_slots(compacted=False)
        limit = torch.tensor([rs.params.max_tokens for rs in self.row_sets for _ in range(rs.rows)], device=device)
        finished = torch.zeros(rows, dtype=torch.bool, device=device)
        stopped = torch.zeros(rows, dtype=torch.bool, device=device)
        length = torch.zeros(rows, dtype=torch.long, device=device)
        self.tokens: torch.Tensor = torch.full((rows, self.steps), self.pad, dtype=torch.long, device=device)
        self.logprobs: torch.Tensor = torch.zeros((rows, self.steps), dtype=torch.float32, device=device)
        self.entropies: torch.Tensor | None = torch.zeros((rows, self.steps), dtype=torch.float32, device=device) \
            if self.want_entropy else None
        self.row_length = torch.zeros(rows, dtype=torch.long, device=device)
        self.row_stopped = torch.zeros(rows, dtype=torch.bool, device=device)
        return limit, finished, stopped, length

    def _count_graphs(self, forward: Forward) -> None:
        graphs = getattr(forward, "graphs", None)
        if graphs is not None:
            self.stats.graph_captures += graphs.captures
            self.stats.graph_replays += graphs.replays
            if graphs.failed:
                self.stats.decoder_note = f"CUDA graphs off: {graphs.failed}"

    def _row_set_slots(self, *, compacted: bool) -> None:
        """Each row set's slot range, and (once compacted) the row-set-local row of each slot."""
        rows = self.slot_row.tolist() if compacted else None
        self.slot_bounds: list[tuple[int, int]] = []
        self.local: list[torch.Tensor | None] = []
        for a, b in self.row_bounds:
            if rows is None:
                self.slot_bounds.append((a, b))
                self.local.append(None)
                continue
            lo, hi = bisect.bisect_left(rows, a), bisect.bisect_left(rows, b)
            self.slot_bounds.append((lo, hi))
            self.local.append(self.slot_row[lo:hi] - a)

    def _choose(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, list[Choice]]:
        choices = []
        for rs, (a, b), local in zip(self.row_sets, self.slot_bounds, self.local, strict=True):
            uniform = None
            if rs.params.temperature > 0.0:
                uniform = torch.rand(rs.rows, generator=rs.generator, device=self.device)
                if local is not None:
                    uniform = uniform[local]
            choices.append(choose(logits[a:b], rs.params, rs.generator, rs.top_n, uniform=uniform))
        token = _cat([c.token for c in choices])
        logp = _cat([c.logprob for c in choices])
        entropy = None
        if self.want_entropy:
            entropy = _cat([c.entropy if c.entropy is not None else torch.zeros_like(c.logprob) for c in choices])
        return token, logp, entropy, choices

    def _full_choices(self, choices: list[Choice], token: torch.Tensor) -> list[Choice]:
        """The observer's view: one entry per row of each row set (compacted rows as pad)."""
        out = []
        for c, t, rs, local in zip(choices, torch.split(token, [b - a for a, b in self.slot_bounds]),
                                    self.row_sets, self.local, strict=True):
            if local is None:
                out.append(Choice(t, c.logprob, c.entropy, c.top_ids, c.top_logprobs))
                continue
            full = Choice(torch.full((rs.rows,), self.pad, dtype=t.dtype, device=t.device).index_copy(0, local, t),
                          torch.zeros(rs.rows, device=t.device).index_copy(0, local, c.logprob.float()))
            if c.top_ids is not None and c.top_logprobs is not None:
                shape = (rs.rows, c.top_ids.shape[1])
                full.top_ids = torch.zeros(shape, dtype=c.top_ids.dtype, device=t.device).index_copy(0, local, c.top_ids)
                full.top_logprobs = torch.full(shape, float("-inf"), device=t.device).index_copy(
                    0, local, c.top_logprobs.float())
            out.append(full)
        return out

    def _flush(self, length: torch.Tensor, stopped: torch.Tensor) -> None:
        self.row_length[self.slot_row] = length
        self.row_stopped[self.slot_row] = stopped

    def _completions(self) -> list[list[Completion]]:
        tok = self.tokens.cpu().tolist()
        lps = self.logprobs.cpu().tolist()
        ents = self.entropies.cpu().tolist() if self.entropies is not None else None
        stop_list = self.row_stopped.cpu().tolist()
        length_list = self.row_length.cpu().tolist()
        routes = self._routes(length_list) if self.log is not None else [None] * self.rows
        results: list[list[Completion]] = []
        for rs, (a, b) in zip(self.row_sets, self.row_bounds, strict=True):
            group = []
            for r in range(a, b):
                n = length_list[r]
                self.stats.generated_tokens += n
                group.append(Completion(token_ids=tok[r][:n], logprobs=lps[r][:n],
                                        finish_reason="stop" if stop_list[r] else "length",
                                        entropies=ents[r][:n] if ents is not None and rs.params.want_entropy else None,
                                        routes=routes[r]))
            results.append(group)
        return results

    def _routes(self, lengths: list[int]) -> list[Routes | None]:
        """Each row's routes: its prompt's (left padding cut) and those of its tokens but the last."""
        prompt, steps = self.prompt_grid.cpu().numpy(), self.step_routes.cpu().numpy()
        width = prompt.shape[1]
        out: list[Routes | None] = []
        for r, n in enumerate(lengths):
            own = len(self.prompts[self.row_prompt[r]])
            out.append(Routes.of(np.concatenate([prompt[r, width - own:], steps[r, :max(n - 1, 0)]])[:own + n - 1]))
        return out


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts)
