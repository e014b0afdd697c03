"""Attention over packed rows (`retrain.backends.local.packing`), as a transformers attention
implementation, and whether a model can run that way.

Inside `packed(model)` every attention layer of the model calls `packed_attention` with the
stream's queries, keys and values [1, heads, T, d] and the `Packed` layout as the keyword
`retrain_packed` (a model forward passes its keyword arguments down to its attention layers).
Each row attends causally over its own view of the stream (its sliding window too, where the
layer has one), so the result at every position equals the padded batch's. Two ways:

- `varlen`: on CUDA, fp16/bf16, no dropout, once `verify_varlen` has checked it on the
  device: torch's variable-length flash attention over the views gathered end to end;
- `sdpa`: elsewhere, the views gathered into a right-padded [R, heads, L, d] batch and
  `scaled_dot_product_attention` with its causal flag (right padding: no real query ever
  reaches a pad) or a causal band mask for a sliding window.

Either way each stream token then takes the output of the row that owns it. What the layer
adds that neither way computes (logit soft-capping, attention sinks, a position bias, a
non-causal layer) raises `PackingUnsupported`, which `support` turns into "run padded".
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from torch.nn import functional as F

from retrain.backends.local.packing import Packed, pack

NAME = "retrain_packed"  # the attention implementation's name in transformers' registry
KEYWORD = "retrain_packed"  # the forward's keyword argument carrying the layout
ATTENTION_LAYERS = frozenset({"full_attention", "sliding_attention"})

calls: Counter[str] = Counter()  # attention calls per way since the last `take_calls`


class PackingUnsupported(RuntimeError):
    """The layer computes something the packed attention does not."""


def packed_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     sliding_window: int | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: [1, H, T, d] in, ([1, T, H, d], None) out."""
    rows = kwargs.get(KEYWORD)
    if not isinstance(rows, Packed):
        raise PackingUnsupported("the packed attention was called without its layout")
    _refuse_extras(module, attention_mask, kwargs)
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))  # [T, heads, d]
    window = int(sliding_window) if sliding_window else 0
    if _varlen_fits(q, dropout):
        out = _varlen(q, k, v, rows, scaling, window)
        calls["varlen"] += 1
    else:
        out = _padded(q, k, v, rows, scaling, window, dropout)
        calls["sdpa"] += 1
    return out.unsqueeze(0), None


def _refuse_extras(module: torch.nn.Module, attention_mask: torch.Tensor | None, kwargs: dict[str, Any]) -> None:
    if attention_mask is not None:
        raise PackingUnsupported("the layer was given an attention mask")
    if not getattr(module, "is_causal", True) or kwargs.get("is_causal") is False:
        raise PackingUnsupported("the layer is not causal")
    for extra in ("softcap", "s_aux", "position_bias", "sinks"):
        if kwargs.get(extra) is not None:
            raise PackingUnsupported(f"the layer uses {extra}")


def _varlen_fits(q: torch.Tensor, dropout: float) -> bool:
    if not q.is_cuda or q.dtype not in (torch.float16, torch.bfloat16) or dropout > 0 or q.shape[-1] > 256:
        return False
    return _verified.get((q.device.index or 0, q.dtype), False)


_verified: dict[tuple[int, torch.dtype], bool] = {}  # verify_varlen's answers by (CUDA device, dtype)


def verify_varlen(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether torch's varlen flash attention is here and agrees with the SDPA path, values and
    gradients, on a small packed case (shared prefix, grouped heads, with and without a
    window); checked once per device and dtype, at setup: it runs a backward of its own, which
    must not happen inside a model's forward (checkpointing's and offloading's saved-tensor
    hooks are active there). A pair never verified takes the SDPA path."""
    key = (device.index or 0, dtype)
    if key not in _verified:
        _verified[key] = device.type == "cuda" and _varlen_agrees(torch.device("cuda", key[0]), dtype)
    return _verified[key]


def _varlen_agrees(device: torch.device, dtype: torch.dtype) -> bool:
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return False
    layout = pack([[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 8, 8], [9, 9, 9]]).to(device)
    g = torch.Generator(device=device)
    try:
        with torch.enable_grad(), torch.autocast("cuda", enabled=False):
            for window in (0, 3):
                got, want = [], []
                for varlen, out in ((True, got), (False, want)):
                    q, k, v = (torch.randn(layout.tokens, h, 64, generator=g.manual_seed(i), device=device,
                                           dtype=dtype).requires_grad_() for i, h in enumerate((4, 2, 2)))
                    y = _varlen(q, k, v, layout, None, window) if varlen else _padded(q, k, v, layout, None, window, 0.0)
                    y.float().square().sum().backward()
                    out += [y.detach(), q.grad, k.grad, v.grad]
                # bf16 sums in another order: rounding, not a leak between rows (which is O(1))
                if any(float((a.float() - b.float()).abs().max()) > 2e-2 * max(1.0, float(b.float().abs().max()))
                       for a, b in zip(got, want, strict=True)):
                    return False
    except (RuntimeError, TypeError, ValueError):  # a device or build whose varlen kernel refuses
        return False
    return True


def _varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: Packed, scaling: float | None,
            window: int) -> torch.Tensor:
    from torch.nn.attention.varlen import varlen_attn

    index = rows.view_index
    out = varlen_attn(q[index], k[index], v[index], rows.cu_seqlens, rows.cu_seqlens, rows.max_len, rows.max_len,
                      scale=scaling, window_size=(window - 1, 0) if window else (-1, 0),
                      enable_gqa=q.shape[1] != k.shape[1])
    return out[rows.own_view]


def _padded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: Packed, scaling: float | None,
            window: int, dropout: float) -> torch.Tensor:
    r, length = rows.row_index.shape
    heads = q.shape[1]
    # Past a row's end its view reads any stream token: right padding under a causal (or
    # banded) mask never lets a real query reach it, and pad queries' outputs are not taken.
    flat = rows.row_index.clamp(max=q.shape[0] - 1).reshape(-1)
    grouped = heads != k.shape[1]  # grouped-query attention: a key/value head serves a group

    def views(x: torch.Tensor, repeat: int = 1) -> torch.Tensor:  # [T, h, d] -> [R, h, L, d]
        x = x.index_select(0, flat).view(r, length, x.shape[1], x.shape[2])
        return (x.repeat_interleave(repeat, dim=2) if repeat > 1 else x).transpose(1, 2)

    mask = None
    if window and window < length:
        i = torch.arange(length, device=q.device)
        mask = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)  # transformers' window
    repeat = heads // k.shape[1] if grouped and not _SDPA_GQA else 1
    extra = {"enable_gqa": True} if grouped and _SDPA_GQA else {}
    out = F.scaled_dot_product_attention(views(q), views(k, repeat), views(v, repeat), attn_mask=mask,
                                         dropout_p=dropout, is_causal=mask is None, scale=scaling, **extra)
    return out.transpose(1, 2).reshape(r * length, heads, -1).index_select(0, rows.own)


_SDPA_GQA = torch.torch_version.TorchVersion(torch.__version__) >= "2.5"  # enable_gqa


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, packed_attention)


_register()


@contextlib.contextmanager
def packed(model: torch.nn.Module) -> Iterator[None]:
    """The model's attention layers run `packed_attention` for the duration (forwards inside
    must pass the layout as `retrain_packed`). No mask is built meanwhile: transformers builds
    none for an implementation without a registered mask function."""
    from transformers import PretrainedConfig

    configs = {id(c): c for m in model.modules() if isinstance(c := getattr(m, "config", None), PretrainedConfig)}
    saved = [(c, c._attn_implementation_internal) for c in configs.values()]
    for c, _ in saved:
        c._attn_implementation_internal = NAME
    try:
        yield
    finally:
        for c, implementation in saved:
            c._attn_implementation_internal = implementation


def take_calls() -> dict[str, int]:
    out = dict(calls)
    calls.clear()
    return out


def support(model: torch.nn.Module, backbone: Any, layers: int) -> str:
    """"" when the model runs packed rows exactly, else why not. Checked once per model: every
    config's layer types are attention, and a probe (two rows sharing a prefix, no gradient,
    eval mode) calls the packed attention once per layer and reproduces the padded rows'
    hidden states."""
    from transformers import PretrainedConfig

    for m in model.modules():
        config = getattr(m, "config", None)
        if isinstance(config, PretrainedConfig):
            kinds = set(getattr(config, "layer_types", None) or ()) - ATTENTION_LAYERS
            if kinds:
                return f"{config.model_type} has {', '.join(sorted(map(str, kinds)))} layers"
    from retrain.kernels import unrecorded

    try:
        with unrecorded():  # the probe's kernel calls are no step's
            return _probe(model, backbone, layers)
    except (PackingUnsupported, TypeError, ValueError, KeyError, RuntimeError) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"


def _probe(model: torch.nn.Module, backbone: Any, layers: int) -> str:
    device = next(model.parameters()).device
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 8)
    rows = [[3 % vocab, 5 % vocab, 7 % vocab, 4 % vocab, 6 % vocab], [3 % vocab, 5 % vocab, 2 % vocab]]
    ids = torch.tensor([rows[0], rows[1] + [0, 0]], device=device)
    layout = pack(rows).to(device)
    was_training = model.training
    model.eval()
    take_calls()
    try:
        with torch.no_grad():
            padded = _last_hidden(backbone(input_ids=ids, use_cache=False))
            with packed(model):
                stream = _last_hidden(backbone(input_ids=layout.input_ids, position_ids=layout.position_ids,
                                               use_cache=False, **{KEYWORD: layout}))[0]
    finally:
        model.train(was_training)
        made = sum(take_calls().values())
    if made != layers:
        return f"{made} of {layers} layers called the packed attention"
    got = stream[layout.row_index[:, :5].clamp(max=layout.tokens - 1)]
    want = padded.float()
    exact = padded.dtype == torch.float32 and stream.dtype == torch.float32
    real = torch.tensor([[True] * 5, [True] * 3 + [False] * 2], device=device)
    err = float((got.float() - want)[real].abs().max())
    tol = (1e-4 if exact else 5e-2) * max(
        1.0, float(want[real].abs().max()))
    return "" if err <= tol else f"the packed rows differ from the padded ones by {err:.3g}"


def _last_hidden(out: Any) -> torch.Tensor:
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
