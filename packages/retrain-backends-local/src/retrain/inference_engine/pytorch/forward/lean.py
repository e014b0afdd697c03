"""retrain's own decoding forward for the llama family (llama, mistral, qwen2, qwen3), on the
transformers model's own weights, with a preallocated KV cache.

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
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from retrain.inference_engine.pytorch.forward.graphs import StepGraphs

FAMILIES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
#: CPU decoding packs weights of at least this many elements, in calls of at least PACK_MIN_STEPS
PACK_MIN_NUMEL, PACK_MIN_STEPS = 1 << 16, 32
#: rotary variants whose frequencies do not depend on the sequence length seen so far
STATIC_ROPE = frozenset({"default", "linear", "llama3", "yarn"})


@dataclass(frozen=True)
class Proj:
    """A linear layer as the decoder runs it: base weight and bias in the compute dtype, and
    each active LoRA adapter's (A, B, scaling)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    loras: tuple[tuple[torch.Tensor, torch.Tensor, float], ...] = ()
    packed: torch.Tensor | None = None  # the weight in oneDNN's blocked layout (CPU decoding)


@dataclass(frozen=True)
class Layer:
    ln1: torch.Tensor
    ln2: torch.Tensor
    q: Proj
    k: Proj
    v: Proj
    o: Proj
    gate: Proj
    up: Proj
    down: Proj
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    act: Callable[[torch.Tensor], torch.Tensor]
    qkv: Packed | None = None  # q, k, v in one packed product (CPU decoding)
    gate_up: Packed | None = None  # gate and up in one packed product (CPU decoding)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = _linears(x, (self.q, self.k, self.v), self.qkv)
        return q, k, v

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = _linears(x, (self.gate, self.up), self.gate_up)
        return _linear(self.act(gate) * up, self.down)


@dataclass(frozen=True)
class Packed:
    """Several linears of one input as one oneDNN product: their weights stacked and packed
    once per call (and their biases stacked); each one's LoRA branch stays its own."""

    weight: torch.Tensor
    bias: torch.Tensor | None


class Unsupported(Exception):
    """Why this model cannot run on the lean forward (the caller uses transformers')."""


@dataclass
class LeanModel:
    embed: torch.Tensor
    layers: list[Layer]
    norm: torch.Tensor
    head: Proj
    rotary: Any  # the model's rotary-embedding module
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    scale: float
    dtype: torch.dtype  # compute dtype of the linears and the KV cache
    max_window: int | None  # the smallest sliding window of any layer (None: all full attention)

    @classmethod
    def of(cls, model: nn.Module, compute_dtype: torch.dtype | None) -> LeanModel:
        """Views of `model`'s weights (a transformers causal LM, peft-wrapped or not); raises
        Unsupported naming what does not fit."""
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
        embed = body.embed_tokens.weight
        dtype = compute_dtype or embed.dtype
        layers, windows = [], []
        first = body.layers[0].self_attn
        heads = int(config.num_attention_heads)
        kv_heads = int(config.num_key_value_heads or heads)
        head_dim = _base(first.q_proj).out_features // heads
        for block in body.layers:
            attn, mlp = block.self_attn, block.mlp
            window = getattr(attn, "sliding_window", None)
            if window:
                windows.append(int(window))
            layers.append(Layer(
                ln1=_norm(block.input_layernorm), ln2=_norm(block.post_attention_layernorm),
                q=_proj(attn.q_proj, dtype), k=_proj(attn.k_proj, dtype), v=_proj(attn.v_proj, dtype),
                o=_proj(attn.o_proj, dtype), gate=_proj(mlp.gate_proj, dtype), up=_proj(mlp.up_proj, dtype),
                down=_proj(mlp.down_proj, dtype),
                q_norm=_norm(attn.q_norm) if hasattr(attn, "q_norm") else None,
                k_norm=_norm(attn.k_norm) if hasattr(attn, "k_norm") else None,
                act=mlp.act_fn))
        return cls(embed=embed, layers=layers, norm=_norm(body.norm), head=_proj(lm.lm_head, dtype),
                   rotary=rotary, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                   eps=float(body.norm.variance_epsilon), scale=float(getattr(first, "scaling", head_dim ** -0.5)),
                   dtype=dtype, max_window=min(windows) if windows else None)

    def packed_for_cpu(self, rows: int) -> LeanModel:
        """The decoding linears with their weights in oneDNN's blocked layout (CPU, fp32):
        about 1.2x faster than `F.linear` at a few dozen rows, and equal to it within fp32
        rounding (another summation order), for a copy of the weights held during the call.
        Packing costs about one pass over the weights (tens of steps of decoding to pay back)
        and does not pay on small matrices, which keep `F.linear`."""
        if self.embed.device.type != "cpu" or self.dtype != torch.float32 or not torch.backends.mkldnn.is_available():
            return self

        def pack(p: Proj) -> Proj:
            if p.weight.numel() < PACK_MIN_NUMEL:
                return p
            return replace(p, packed=torch.ops.mkldnn._reorder_linear_weight(p.weight, rows))

        def stack(*ps: Proj) -> Packed:
            biases = [p.bias for p in ps]
            bias = None if all(b is None for b in biases) else torch.cat(
                [b if b is not None else p.weight.new_zeros(p.weight.shape[0]) for p, b in zip(ps, biases, strict=True)])
            return Packed(torch.ops.mkldnn._reorder_linear_weight(torch.cat([p.weight for p in ps]), rows), bias)

        layers = [replace(layer, o=pack(layer.o), down=pack(layer.down), qkv=stack(layer.q, layer.k, layer.v),
                          gate_up=stack(layer.gate, layer.up)) for layer in self.layers]
        return replace(self, layers=layers, head=pack(self.head))

    def rope_table(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [length, head dim] in fp32 for positions 0..length-1 (transformers computes
        them in fp32 and casts to the residual dtype, fp32 under autocast)."""
        probe = torch.zeros((), dtype=self.embed.dtype, device=device)
        cos, sin = self.rotary(probe, torch.arange(length, device=device)[None])
        return cos[0], sin[0]


class LeanForward:
    """The decode loop's forward on LeanModel: `prefill` once, then `step` per token. Rows are
    the expanded batch (each prompt repeated for its samples)."""

    def __init__(self, lean: LeanModel, ids: torch.Tensor, mask: torch.Tensor, expand: torch.Tensor,
                 steps: int, *, graphs: bool = False) -> None:
        """ids, mask [prompts, width] left-padded; expand [rows]: the prompt of each row; `steps`
        decoding steps at most (the cache holds width + steps - 1 columns: the last token
        sampled is never fed back)."""
        device = ids.device
        self.rows, self.width = int(expand.numel()), int(ids.shape[1])
        self.columns = self.width + max(steps - 1, 1)
        if lean.max_window is not None and self.columns > lean.max_window:
            raise Unsupported(f"a sliding window of {lean.max_window} tokens shorter than the sequence")
        self.m = lean.packed_for_cpu(self.rows) if steps >= PACK_MIN_STEPS else lean
        self.cos, self.sin = lean.rope_table(self.columns, device)
        self.kv = torch.zeros((len(lean.layers), 2, self.rows, lean.kv_heads, self.columns, lean.head_dim),
                              dtype=lean.dtype, device=device)
        self.keys = torch.zeros((self.rows, self.columns), dtype=torch.bool, device=device)
        self.keys[:, :self.width] = mask.bool()[expand]
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        self.pos = (positions[:, -1] + 1)[expand].clone()
        self.token = torch.zeros(self.rows, dtype=torch.long, device=device)
        self.column = torch.full((1,), self.width, dtype=torch.long, device=device)
        self.col = self.width
        self.n = self.rows
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
        self.keys[:n, self.col] = True
        logits = self.graphs(n) if self.graphs is not None else self.step_logits(n, self.col + 1)
        self.pos[:n] += 1
        self.col += 1
        return logits

    def compact(self, keep: torch.Tensor) -> None:
        """Rows `keep` (ascending slot indices) move to the front; the rest are dropped."""
        n = int(keep.numel())
        self.kv[:, :, :n] = self.kv[:, :, keep]
        self.keys[:n] = self.keys[keep]
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
        keys = self.keys[:n, None, None, :upto]
        for i, layer in enumerate(m.layers):
            kc, vc = self.kv[i, 0, :n], self.kv[i, 1, :n]
            q, k, v = layer.project(_rms(x, layer.ln1, m.eps))
            q, k, v = q.view(n, m.heads, m.head_dim), k.view(n, m.kv_heads, m.head_dim), v.view(n, m.kv_heads, m.head_dim)
            if layer.q_norm is not None and layer.k_norm is not None:
                q, k = _rms(q, layer.q_norm, m.eps), _rms(k, layer.k_norm, m.eps)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
            kc.index_copy_(2, self.column, k.to(m.dtype)[:, :, None])
            vc.index_copy_(2, self.column, v.to(m.dtype)[:, :, None])
            a = F.scaled_dot_product_attention(q.to(m.dtype).view(n, m.kv_heads, g, m.head_dim),
                                               kc[:, :, :upto], vc[:, :, :upto], attn_mask=keys, scale=m.scale)
            x = x + _linear(a.reshape(n, m.heads * m.head_dim), layer.o)
            x = x + layer.mlp(_rms(x, layer.ln2, m.eps))
        return _linear(_rms(x, m.norm, m.eps), m.head)

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
            q, k, v = layer.project(_rms(x, layer.ln1, m.eps))
            q, k, v = q.view(b, p, m.heads, m.head_dim), k.view(b, p, m.kv_heads, m.head_dim), v.view(b, p, m.kv_heads, m.head_dim)
            if layer.q_norm is not None and layer.k_norm is not None:
                q, k = _rms(q, layer.q_norm, m.eps), _rms(k, layer.k_norm, m.eps)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
            k, v = k.to(m.dtype), v.to(m.dtype)
            self.kv[i, 0, rows, :, :p] = k[source]
            self.kv[i, 1, rows, :, :p] = v[source]
            a = F.scaled_dot_product_attention(q.to(m.dtype), k.repeat_interleave(g, dim=1),
                                               v.repeat_interleave(g, dim=1), attn_mask=attend, scale=m.scale)
            x = x + _linear(a.transpose(1, 2).reshape(b, p, m.heads * m.head_dim), layer.o)
            x = x + layer.mlp(_rms(x, layer.ln2, m.eps))
        return _linear(_rms(x[:, -1], m.norm, m.eps), m.head)[source]


# -- the ops, as transformers writes them ---------------------------------------------------------
def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _linears(x: torch.Tensor, projs: tuple[Proj, ...], packed: Packed | None) -> list[torch.Tensor]:
    """Each of `projs` applied to x; one packed product for all of them where there is one
    (decoding on the CPU: x [rows, in]; the prefill's 3-d input runs them one by one)."""
    if packed is None or x.dim() != 2:
        return [_linear(x, p) for p in projs]
    x = x.to(projs[0].weight.dtype)
    y = torch.ops.mkldnn._linear_pointwise(x, packed.weight, packed.bias, "none", [], "")
    outs = list(y.split([p.weight.shape[0] for p in projs], dim=-1))
    for i, p in enumerate(projs):
        for a, b, scaling in p.loras:
            outs[i] = outs[i] + F.linear(F.linear(x, a), b) * scaling
    return outs


def _linear(x: torch.Tensor, p: Proj) -> torch.Tensor:
    x = x.to(p.weight.dtype)
    if p.packed is not None and x.dim() == 2:
        y = torch.ops.mkldnn._linear_pointwise(x, p.packed, p.bias, "none", [], "")
    else:
        y = F.linear(x, p.weight, p.bias)
    for a, b, scaling in p.loras:
        y = y + F.linear(F.linear(x, a), b) * scaling
    return y


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


def _proj(module: Any, dtype: torch.dtype) -> Proj:
    """`module` is an nn.Linear or a peft LoRA layer over one."""
    base = _base(module)
    weight = base.weight if base.weight.dtype == dtype else base.weight.to(dtype)
    bias = None if base.bias is None else base.bias.to(dtype)
    if module is base or getattr(module, "merged", False) or getattr(module, "disable_adapters", False):
        return Proj(weight, bias)
    loras: list[tuple[torch.Tensor, torch.Tensor, float]] = []
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        if name in getattr(module, "lora_variant", {}) or getattr(module, "use_dora", {}).get(name, False):
            raise Unsupported(f"the LoRA variant of adapter {name!r} (DoRA or another)")
        a, b = module.lora_A[name], module.lora_B[name]
        if type(a) is not nn.Linear or type(b) is not nn.Linear or b.bias is not None:
            raise Unsupported(f"adapter {name!r} is not a plain LoRA pair")
        loras.append((a.weight.to(dtype), b.weight.to(dtype), float(module.scaling[name])))
    return Proj(weight, bias, tuple(loras))


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
