"""retrain's own decoding forward for the llama family (llama, mistral, qwen2, qwen3), on the
transformers model's own weights, with a preallocated KV cache. Which layers it runs is read
from the model family's plan (`retrain.models.layers`): full attention and dense MLPs today;
a family whose plan holds anything else (a sliding window shorter than the sequence, linear
attention, experts, soft-capped logits) decodes on transformers' forward, with the reason in
`engine_decoder_note`. The plan is where a decoder for those layers reads how to run them.

transformers' forward spends most of a decoding step in Python (cache objects, mask builders,
hooks, peft's per-adapter dispatch): per layer it costs more than the layer's arithmetic on
small models, and on a GPU it launches more kernels than the weights take to read. Here one
step is a straight run of tensor ops on fixed buffers, so on CUDA it can be captured once as
a graph (`forward.graphs`) and replayed per token.

Numerics follow transformers' code path op for op, in the same dtypes: the residual stream in
the embeddings' dtype, RMSNorm in fp32 and `weight * x.to(input dtype)`, rotary embeddings in
fp32, each linear (and each LoRA branch, `y + B(A x) * s` as peft adds it) in the compute
dtype. Under autocast the compute dtype is autocast's and the base weights are cast once per
sampling call (autocast casts them at every forward); otherwise it is the weights' own.
Attention is `scaled_dot_product_attention`; a decoding query attends over the cache with the
query heads of one KV head stacked as its rows (the same products as repeating the KV heads).

The KV cache is [layers, 2, rows, kv heads, columns, head dim], zeroed (a masked column must
hold finite values: softmax gives it weight 0, and 0 x NaN is NaN). Column c holds prompt
position c of a left-padded prompt (padding masked) and, from the prompt's width on, one
decoded token per column. Rows can be compacted to a prefix (`keep`) when some finish: the
buffers stay where they are, so a graph captured for a prefix size stays valid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from retrain.inference_engine.pytorch.forward.graphs import StepGraphs
from retrain.models.family import family_of

FAMILIES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
#: CPU decoding packs weights of at least this many elements, in calls of at least PACK_MIN_STEPS
PACK_MIN_NUMEL, PACK_MIN_STEPS = 1 << 16, 32
#: rotary variants whose frequencies do not depend on the sequence length seen so far
STATIC_ROPE = frozenset({"default", "linear", "llama3", "yarn"})


@dataclass(frozen=True)
class Part:
    """One linear layer as the model holds it: base weight and bias, and each active LoRA
    adapter's (A, B, scaling)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    loras: tuple[tuple[torch.Tensor, torch.Tensor, float], ...] = ()


@dataclass(frozen=True)
class Linear:
    """One or several linears of one input as one product: `weight` [sum of outs, in] in the
    compute dtype (oneDNN-packed when `packed`), `bias`, and every LoRA delta of every part as
    one low-rank product: `lora_a` [sum of ranks, in], `lora_b` [sum of outs, sum of ranks],
    block-diagonal over the parts, each adapter's B scaled by its scaling (peft scales the
    product instead: the same value when the scaling is a power of two, as alpha = 2r makes
    it, else within one rounding). `sizes` splits the output back into the parts."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    sizes: tuple[int, ...]
    dtype: torch.dtype
    lora_a: torch.Tensor | None = None
    lora_b: torch.Tensor | None = None
    packed: bool = False

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.dtype)
        if self.packed and x.dim() == 2:
            y = torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        elif self.packed:
            y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), self.weight, self.bias,
                                                   "none", [], "").unflatten(0, x.shape[:-1])
        else:
            y = F.linear(x, self.weight, self.bias)
        if self.lora_a is not None and self.lora_b is not None:
            y = y + F.linear(F.linear(x, self.lora_a), self.lora_b)
        return y

    @classmethod
    def of(cls, parts: Sequence[Part], dtype: torch.dtype, pack_rows: int | None) -> Linear:
        """`parts` stacked into one product (several parts are only stacked when their weights
        are copied anyway: cast to the compute dtype, or packed)."""
        weight = parts[0].weight if len(parts) == 1 else torch.cat([p.weight for p in parts])
        weight = weight.to(dtype)
        sizes = tuple(int(p.weight.shape[0]) for p in parts)
        bias = None
        if any(p.bias is not None for p in parts):
            bias = torch.cat([p.bias if p.bias is not None else p.weight.new_zeros(p.weight.shape[0])
                              for p in parts]).to(dtype)
        lora_a = lora_b = None
        ranks = [sum(int(a.shape[0]) for a, _, _ in p.loras) for p in parts]
        if sum(ranks):
            lora_a = torch.cat([a for p in parts for a, _, _ in p.loras]).to(dtype)
            lora_b = weight.new_zeros((sum(sizes), sum(ranks)), dtype=torch.float32)
            row = col = 0
            for p, size in zip(parts, sizes, strict=True):
                for a, b, scaling in p.loras:
                    lora_b[row:row + size, col:col + a.shape[0]] = b.float() * scaling
                    col += a.shape[0]
                row += size
            lora_b = lora_b.to(dtype)
        packed = pack_rows is not None and weight.numel() >= PACK_MIN_NUMEL
        if packed:
            weight = torch.ops.mkldnn._reorder_linear_weight(weight, pack_rows)
        return cls(weight, bias, sizes, dtype, lora_a, lora_b, packed)


@dataclass(frozen=True)
class Layer:
    ln1: torch.Tensor
    ln2: torch.Tensor
    qkv: tuple[Linear, ...]  # q, k, v stacked into one product, or one each
    o: Linear
    gate_up: tuple[Linear, ...]  # gate and up stacked, or one each
    down: Linear
    qk_norm: torch.Tensor | None  # [heads + kv heads, head dim]: q_norm's weight, then k_norm's
    act: Callable[[torch.Tensor], torch.Tensor]

    def attention_inputs(self, x: torch.Tensor, m: LeanModel) -> tuple[torch.Tensor, torch.Tensor]:
        """(queries and keys as one [..., heads + kv heads, head dim], values [..., kv heads,
        head dim]): q and k take the same per-head norm and rotation, so they take them once."""
        qk_width = (m.heads + m.kv_heads) * m.head_dim
        if len(self.qkv) == 1:
            y = self.qkv[0](x)
            qk, v = y[..., :qk_width], y[..., qk_width:]
        else:
            q, k, v = (lin(x) for lin in self.qkv)
            qk = torch.cat([q, k], dim=-1)
        qk = qk.unflatten(-1, (m.heads + m.kv_heads, m.head_dim))
        if self.qk_norm is not None:
            qk = _rms(qk, self.qk_norm, m.eps)
        return qk, v.unflatten(-1, (m.kv_heads, m.head_dim))

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        if len(self.gate_up) == 1:
            gate, up = self.gate_up[0](x).split(list(self.gate_up[0].sizes), dim=-1)
        else:
            gate, up = (lin(x) for lin in self.gate_up)
        return self.down(self.act(gate) * up)


class Unsupported(Exception):
    """Why this model cannot run on the lean forward (the caller uses transformers')."""


@dataclass
class LeanModel:
    embed: torch.Tensor
    layers: list[Layer]
    norm: torch.Tensor
    head: Linear
    rotary: Any  # the model's rotary-embedding module
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    scale: float
    dtype: torch.dtype  # compute dtype of the linears and the KV cache

    @classmethod
    def of(cls, model: nn.Module, compute_dtype: torch.dtype | None, *, columns: int,
           pack_rows: int | None = None) -> LeanModel:
        """The decoder on `model`'s weights (a transformers causal LM, peft-wrapped or not) for
        sequences of `columns` tokens; raises Unsupported naming what does not fit. The
        linears of one input are stacked where their weights are copied anyway (a cast to
        the compute dtype, or `pack_rows`: oneDNN-packed for that many rows on the CPU)."""
        lm: Any = model.get_base_model() if hasattr(model, "get_base_model") else model
        config: Any = getattr(lm, "config", None)
        family = getattr(config, "model_type", None)
        if family not in FAMILIES:
            raise Unsupported(f"model type {family!r} (the lean forward runs {', '.join(sorted(FAMILIES))})")
        body: Any = getattr(lm, "model", None)
        if body is None or not isinstance(getattr(body, "embed_tokens", None), nn.Embedding):
            raise Unsupported("the embeddings are not a plain nn.Embedding")
        _refuse_hooks(lm)
        if any(_is_distributed(p) for p in lm.parameters()):
            raise Unsupported("sharded (DTensor) parameters")
        rotary = body.rotary_emb
        rope = str(getattr(rotary, "rope_type", "default"))
        if rope not in STATIC_ROPE:
            raise Unsupported(f"rotary type {rope!r}")
        # the family's plan says how each layer runs (transformers 5 keeps the sliding window on
        # the config, not on the attention module); this decoder runs full attention (a window
        # no shorter than the sequence is one) and dense MLPs
        why = family_of(config).plan(config).unsupported(columns=columns)
        if why is not None:
            raise Unsupported(why)
        embed = body.embed_tokens.weight
        dtype = compute_dtype or embed.dtype
        if pack_rows is not None and (embed.device.type != "cpu" or dtype != torch.float32
                                      or not torch.backends.mkldnn.is_available()):
            pack_rows = None
        stack = pack_rows is not None or dtype != embed.dtype

        def linears(*modules: Any) -> tuple[Linear, ...]:
            parts = [_part(module) for module in modules]
            if stack:
                return (Linear.of(parts, dtype, pack_rows),)
            return tuple(Linear.of([p], dtype, pack_rows) for p in parts)

        first = body.layers[0].self_attn
        heads = int(config.num_attention_heads)
        kv_heads = int(config.num_key_value_heads or heads)
        head_dim = _base(first.q_proj).out_features // heads
        layers = []
        for block in body.layers:
            attn, mlp = block.self_attn, block.mlp
            qk_norm = None
            if hasattr(attn, "q_norm"):
                qk_norm = torch.cat([_norm(attn.q_norm).expand(heads, head_dim),
                                     _norm(attn.k_norm).expand(kv_heads, head_dim)])
            layers.append(Layer(
                ln1=_norm(block.input_layernorm), ln2=_norm(block.post_attention_layernorm),
                qkv=linears(attn.q_proj, attn.k_proj, attn.v_proj), o=linears(attn.o_proj)[0],
                gate_up=linears(mlp.gate_proj, mlp.up_proj), down=linears(mlp.down_proj)[0],
                qk_norm=qk_norm, act=mlp.act_fn))
        return cls(embed=embed, layers=layers, norm=_norm(body.norm), head=linears(lm.lm_head)[0],
                   rotary=rotary, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                   eps=float(body.norm.variance_epsilon), scale=float(getattr(first, "scaling", head_dim ** -0.5)),
                   dtype=dtype)

    def rope_table(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [length, head dim] in fp32 for positions 0..length-1 (transformers computes
        them in fp32 and casts to the residual dtype, fp32 under autocast)."""
        probe = torch.zeros((), dtype=self.embed.dtype, device=device)
        cos, sin = self.rotary(probe, torch.arange(length, device=device)[None])
        return cos[0], sin[0]


class LeanForward:
    """The decode loop's forward on LeanModel: the prompts prefilled once, then one step per
    token. Rows are the expanded batch (each prompt repeated for its samples)."""

    def __init__(self, model: nn.Module, compute_dtype: torch.dtype | None, ids: torch.Tensor, mask: torch.Tensor,
                 expand: torch.Tensor, steps: int, *, graphs: bool = False) -> None:
        """ids, mask [prompts, width] left-padded; expand [rows]: the prompt of each row; `steps`
        decoding steps at most (the cache holds width + steps - 1 columns: the last token
        sampled is never fed back)."""
        device = ids.device
        self.rows, self.width = int(expand.numel()), int(ids.shape[1])
        self.columns = self.width + max(steps - 1, 1)
        self.m = m = LeanModel.of(model, compute_dtype, columns=self.columns,
                                  pack_rows=self.rows if steps >= PACK_MIN_STEPS else None)
        self.cos, self.sin = m.rope_table(self.columns, device)
        self.kv = torch.zeros((len(m.layers), 2, self.rows, m.kv_heads, self.columns, m.head_dim),
                              dtype=m.dtype, device=device)
        # additive key mask: 0 where a row may attend, -inf on padding and unwritten columns
        self.bias = torch.full((self.rows, self.columns), float("-inf"), dtype=m.dtype, device=device)
        self.bias[:, :self.width].masked_fill_(mask.bool()[expand], 0.0)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        self.pos = (positions[:, -1] + 1)[expand].clone()
        self.token = torch.zeros(self.rows, dtype=torch.long, device=device)
        self.column = torch.full((1,), self.width, dtype=torch.long, device=device)
        self.col = self.width
        self.n = self.rows
        self.compactable = True
        self._prompt_logits: torch.Tensor | None = self._prefill(ids, mask, positions, expand)
        self.graphs = StepGraphs(lambda n: self.step_logits(n, self.columns)) if graphs else None

    # -- the loop's interface ------------------------------------------------------------------
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
        self.kv[:, :, :n] = self.kv[:, :, keep]
        self.bias[:n] = self.bias[keep]
        self.pos[:n] = self.pos[keep]
        self.n = n

    def step_logits(self, n: int, upto: int) -> torch.Tensor:
        """Logits [n, V] of the staged tokens of the first n rows, attending over the first
        `upto` columns. A pure function of the staged buffers and the cache (it writes the
        cache at `column`): the same call is what a CUDA graph captures."""
        m = self.m
        g = m.heads // m.kv_heads
        x = F.embedding(self.token[:n], m.embed)
        cos, sin = self.cos[self.pos[:n]][:, None], self.sin[self.pos[:n]][:, None]
        bias = self.bias[:n, None, None, :upto]
        for i, layer in enumerate(m.layers):
            kc, vc = self.kv[i, 0, :n], self.kv[i, 1, :n]
            qk, v = layer.attention_inputs(_rms(x, layer.ln1, m.eps), m)
            qk = _rope(qk, cos, sin)
            kc.index_copy_(2, self.column, qk[:, m.heads:].to(m.dtype)[:, :, None])
            vc.index_copy_(2, self.column, v.to(m.dtype)[:, :, None])
            q = qk[:, :m.heads].to(m.dtype).reshape(n, m.kv_heads, g, m.head_dim)
            a = F.scaled_dot_product_attention(q, kc[:, :, :upto], vc[:, :, :upto], attn_mask=bias, scale=m.scale)
            x = x + layer.o(a.reshape(n, m.heads * m.head_dim))
            x = x + layer.mlp(_rms(x, layer.ln2, m.eps))
        return m.head(_rms(x, m.norm, m.eps))

    # -- prefill -------------------------------------------------------------------------------
    def _prefill(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                 expand: torch.Tensor) -> torch.Tensor:
        """Each distinct prompt once (in chunks that bound the [P, P] masks), its keys and values
        copied to every row that continues it; the last position's logits per row."""
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
        b, p = ids.shape
        g = m.heads // m.kv_heads
        x = F.embedding(ids, m.embed)
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]
        # causal over real keys; a padding query also sees itself, so no row of softmax is empty
        causal = torch.ones((p, p), dtype=torch.bool, device=ids.device).tril()
        attend = (causal[None] & mask.bool()[:, None, :]) | torch.eye(p, dtype=torch.bool, device=ids.device)[None]
        attend = attend[:, None]
        for i, layer in enumerate(m.layers):
            qk, v = layer.attention_inputs(_rms(x, layer.ln1, m.eps), m)
            qk = _rope(qk.transpose(1, 2), cos, sin)
            q, k, v = qk[:, :m.heads].to(m.dtype), qk[:, m.heads:].to(m.dtype), v.transpose(1, 2).to(m.dtype)
            self.kv[i, 0, rows, :, :p] = k[source]
            self.kv[i, 1, rows, :, :p] = v[source]
            a = F.scaled_dot_product_attention(q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1),
                                               attn_mask=attend, scale=m.scale)
            x = x + layer.o(a.transpose(1, 2).reshape(b, p, m.heads * m.head_dim))
            x = x + layer.mlp(_rms(x, layer.ln2, m.eps))
        return m.head(_rms(x[:, -1], m.norm, m.eps))[source]


# -- the ops, as transformers writes them ---------------------------------------------------------
def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' `weight * (x * rsqrt(mean(x²) + eps)).to(x's dtype)`, the norm in fp32."""
    if x.dtype == weight.dtype == torch.float32 and weight.dim() == 1:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return weight * F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


# -- reading the transformers / peft module tree ---------------------------------------------------
def _norm(module: Any) -> torch.Tensor:
    if not type(module).__name__.endswith("RMSNorm") or not hasattr(module, "variance_epsilon"):
        raise Unsupported(f"a {type(module).__name__} norm")
    return module.weight


def _base(module: Any) -> nn.Linear:
    base = getattr(module, "base_layer", module)
    if type(base) is not nn.Linear or not base.weight.is_floating_point():
        raise Unsupported(f"a {type(base).__name__} layer (quantised or custom)")
    return base


def _part(module: Any) -> Part:
    """`module` is an nn.Linear or a peft LoRA layer over one."""
    base = _base(module)
    if module is base or getattr(module, "merged", False) or getattr(module, "disable_adapters", False):
        return Part(base.weight, base.bias)
    loras: list[tuple[torch.Tensor, torch.Tensor, float]] = []
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        if name in getattr(module, "lora_variant", {}) or getattr(module, "use_dora", {}).get(name, False):
            raise Unsupported(f"the LoRA variant of adapter {name!r} (DoRA or another)")
        a, b = module.lora_A[name], module.lora_B[name]
        if type(a) is not nn.Linear or type(b) is not nn.Linear or b.bias is not None:
            raise Unsupported(f"adapter {name!r} is not a plain LoRA pair")
        loras.append((a.weight, b.weight, float(module.scaling[name])))
    return Part(base.weight, base.bias, tuple(loras))


#: hooks that act on gradients only, which sampling (inference mode) has none of: retrain's
#: LoRA-input detach and the embeddings' requires-grad hook of gradient checkpointing
#: (transformers' and peft's)
GRADIENT_ONLY_HOOKS = frozenset({"retrain.kernels.lora._detach_first",
                                 "transformers.modeling_utils.make_inputs_require_grads",
                                 "peft.peft_model.make_inputs_require_grad",
                                 "peft.utils.other.make_inputs_require_grad"})


def _refuse_hooks(model: nn.Module) -> None:
    """A forward hook (accelerate's offloading, a user's patch) would be skipped here."""
    for name, module in model.named_modules():
        if getattr(module, "_hf_hook", None) is not None:
            raise Unsupported(f"an accelerate hook on {name or 'the model'}")
        hooks: Sequence[object] = [*module._forward_hooks.values(), *module._forward_pre_hooks.values()]
        for hook in hooks:
            qualname = f"{getattr(hook, '__module__', '')}.{getattr(hook, '__name__', '')}"
            if qualname not in GRADIENT_ONLY_HOOKS:
                raise Unsupported(f"a forward hook on {name or 'the model'} ({qualname})")


def _is_distributed(p: torch.Tensor) -> bool:
    return type(p).__name__ == "DTensor" or type(getattr(p, "data", p)).__name__ == "DTensor"
