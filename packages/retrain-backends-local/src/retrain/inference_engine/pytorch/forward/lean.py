"""retrain's own decoding forward, on the transformers model's own weights, with state
preallocated for the whole call: the llama family (llama, mistral with its sliding window,
qwen2, qwen3), Qwen3-MoE, Qwen3.5 (its hybrid Gated DeltaNet layers), Gemma 3 and Gemma 4,
text-only or the text model of a multimodal checkpoint, and the mixture-of-experts families by
their layer kinds (gpt-oss, Mixtral, Qwen2-MoE, OLMoE, DeepSeek-V3, GLM-4.5, Qwen3-Next, Llama
4's text model). How each layer runs is the model family's plan
(`retrain.models.layers`, built into a `forward.model.LeanModel` by `forward.build`); a model
it does not run decodes on transformers' forward, with the reason in `engine_decoder_note`.

transformers' forward spends most of a decoding step in Python (cache objects, mask builders,
hooks, peft's per-adapter dispatch): per layer it costs more than the layer's arithmetic on
small models, and on a GPU it launches more kernels than the weights take to read. Here one
step is a straight run of tensor ops on fixed buffers, so on CUDA it can be captured once as
a graph (`forward.graphs`) and replayed per token.

Numerics follow transformers' code path op for op, in the same dtypes: the residual stream in
the embeddings' dtype, RMSNorm and rotary embeddings in fp32, each linear (and each LoRA
branch, `y + B(A x) * s` as peft adds it) in the compute dtype (`forward.linear`), the gated
delta rule's state in fp32. Attention is `scaled_dot_product_attention`.

Columns: column c holds prompt position c of a left-padded prompt (padding masked) and, from
the prompt's width on, one decoded token per column, in every layer's cache. A sliding window
is a mask over the columns (a key in column j is seen from column i when i - window < j <= i:
positions and columns differ by the row's padding only); a chunk is too, counted from the row's
first real token (Llama 4). Rows can be compacted to a prefix
(`keep`) when some finish: the buffers stay where they are, so a graph captured for a prefix
size stays valid.
"""

from __future__ import annotations

import torch
from torch import nn

from retrain.inference_engine.pytorch.forward.build import build
from retrain.inference_engine.pytorch.forward.context import FULL, Prefill, Span, Step
from retrain.inference_engine.pytorch.forward.graphs import StepGraphs
from retrain.inference_engine.pytorch.forward.linear import PACK_MIN_STEPS


class LeanForward:
    """The decode loop's forward on LeanModel: the prompts prefilled once, then one step per
    token. Rows are the expanded batch (each prompt repeated for its samples)."""

    def __init__(self, model: nn.Module, compute_dtype: torch.dtype | None, ids: torch.Tensor, mask: torch.Tensor,
                 expand: torch.Tensor, steps: int, *, graphs: bool = False) -> None:
        """ids, mask [prompts, width] left-padded; expand [rows]: the prompt of each row; `steps`
        decoding steps at most (the state holds width + steps - 1 columns: the last token
        sampled is never fed back)."""
        device = ids.device
        self.rows, self.width = int(expand.numel()), int(ids.shape[1])
        self.columns = self.width + max(steps - 1, 1)
        self.m = m = build(model, compute_dtype, columns=self.columns,
                           pack_rows=self.rows if steps >= PACK_MIN_STEPS else None)
        self.tables = m.rope_tables(self.columns, device)
        self.state = [block.mixer.allocate(self.rows, self.columns, device) for block in m.blocks]
        # additive key mask: 0 where a row may attend, -inf on padding and unwritten columns
        self.bias = torch.full((self.rows, self.columns), float("-inf"), dtype=m.dtype, device=device)
        self.bias[:, :self.width].masked_fill_(mask.bool()[expand], 0.0)
        self.column_index = torch.arange(self.columns, device=device)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        self.pos = (positions[:, -1] + 1)[expand].clone()
        self.token = torch.zeros(self.rows, dtype=torch.long, device=device)
        self.column = torch.full((1,), self.width, dtype=torch.long, device=device)
        self.col = self.width
        self.n = self.rows
        self.compactable = True
        self._prompt_logits: torch.Tensor | None = self._prefill(ids, mask, positions, expand)
        self.graphs = StepGraphs(lambda n: self.step_logits(n, self.columns)) if graphs else None

    def first_logits(self) -> torch.Tensor:
        logits, self._prompt_logits = self._prompt_logits, None
        assert logits is not None
        return logits

    def next_logits(self, token: torch.Tensor) -> torch.Tensor:
        """Feed the sampled tokens [n] at the next column; the logits [n, V] that follow. The
        graphed step attends over every column (a graph has one shape), the eager one over
        the columns written so far."""
        n = self.n
        self.token[:n].copy_(token)
        self.column.fill_(self.col)
        self.bias[:n, self.col] = 0.0
        logits = self.graphs(n) if self.graphs is not None else self.step_logits(n, self.col + 1)
        self.pos[:n] += 1
        self.col += 1
        return logits

    def compact(self, keep: torch.Tensor) -> None:
        """Rows `keep` (ascending slot indices) move to the front; the rest are dropped."""
        n = int(keep.numel())
        for state in self.state:
            for t in state:
                t[:n] = t[keep]
        self.bias[:n] = self.bias[keep]
        self.pos[:n] = self.pos[keep]
        self.n = n

    def step_logits(self, n: int, upto: int) -> torch.Tensor:
        """Logits [n, V] of the staged tokens of the first n rows, attending over the first
        `upto` columns. A pure function of the staged buffers and the state (it writes the
        state at `column`): the same call is what a CUDA graph captures."""
        m = self.m
        x = m.embeddings(self.token[:n])
        pos = self.pos[:n]
        rope = {key: (cos[pos][:, None], sin[pos][:, None]) for key, (cos, sin) in self.tables.items()}
        ctx = Step(n, self.column, rope, pos, self._views(n, upto, pos), self.state,
                   m.per_layer(self.token[:n], x) if m.per_layer is not None else None)
        for block in m.blocks:
            x = block.step(x, ctx)
        return m.logits(x)

    def _views(self, n: int, upto: int, pos: torch.Tensor) -> dict[Span, tuple[slice, torch.Tensor]]:
        """Each span's columns and key mask: all columns written so far for full attention;
        for a window, the columns it covers (eager) or all of them with the rest masked (the
        graphed step, which attends over every column); for chunks, the columns written so far
        with those before the row's chunk masked (a row's chunk starts `pos % chunk` columns
        back)."""
        bias = self.bias[:n, None, None]
        views = {FULL: (slice(0, upto), bias[..., :upto])}
        for span in self.m.spans:
            kind, size = span
            if kind == "chunked":
                start = self.column - pos % size  # [n]
                outside = self.column_index[:upto] < start[:, None]
                views[span] = (slice(0, upto), bias[..., :upto].masked_fill(outside[:, None, None], float("-inf")))
            elif upto == self.columns:
                outside = self.column_index <= self.column - size
                views[span] = (slice(0, upto), bias.masked_fill(outside, float("-inf")))
            else:
                lo = max(0, upto - size)
                views[span] = (slice(lo, upto), bias[..., lo:upto])
        return views

    def _prefill(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                 expand: torch.Tensor) -> torch.Tensor:
        """Each distinct prompt once (in chunks that bound the [P, P] masks), its state copied
        to every row that continues it; the last position's logits per row."""
        prompts, width = ids.shape
        chunk = max(1, (1 << 24) // (width * width))
        offsets = [0]
        for count in torch.bincount(expand, minlength=prompts).tolist():  # rows are prompt-major
            offsets.append(offsets[-1] + count)
        logits = []
        for start in range(0, prompts, chunk):
            end = min(prompts, start + chunk)
            first, last = offsets[start], offsets[end]
            logits.append(self._prefill_chunk(ids[start:end], mask[start:end], positions[start:end],
                                              slice(first, last), expand[first:last] - start))
        return torch.cat(logits)

    def _prefill_chunk(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                       rows: slice, source: torch.Tensor) -> torch.Tensor:
        m = self.m
        p = ids.shape[1]
        x = m.embeddings(ids)
        real = mask.bool()
        # causal over real keys; a padding query also sees itself, so no row of softmax is empty
        causal = torch.ones((p, p), dtype=torch.bool, device=ids.device).tril()
        own = torch.eye(p, dtype=torch.bool, device=ids.device)[None]
        attend = {FULL: ((causal[None] & real[:, None, :]) | own)[:, None]}
        for span in m.spans:
            kind, size = span
            if kind == "chunked":
                same = (positions[:, :, None] // size) == (positions[:, None, :] // size)
                attend[span] = ((causal[None] & same & real[:, None, :]) | own)[:, None]
            else:
                band = causal & ~torch.ones_like(causal).tril(-size)
                attend[span] = ((band[None] & real[:, None, :]) | own)[:, None]
        rope = {key: (cos[positions][:, None], sin[positions][:, None]) for key, (cos, sin) in self.tables.items()}
        ctx = Prefill(real, attend, rope, positions, rows, source, self.state,
                      m.per_layer(ids, x) if m.per_layer is not None else None, m.sources)
        for block in m.blocks:
            x = block.prefill(x, ctx)
        return m.logits(x[:, -1])[source]
