"""How the local backend runs an update's forward and backward passes, decided once when it is
built: the micro-batch layouts of RL and SFT steps (retrain.backends.local.micro), whether rows
run packed, how the selected tokens are scored (the sampler's truncation, the head at every
position or only where the loss reads, the compiled head), and what a step reports of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from retrain.backends.local.batch import Batch
from retrain.backends.local.logprobs import CompiledHead, Scoring, split_head
from retrain.backends.local.micro import Layout, token_metrics
from retrain.backends.local.options import LocalOptions
from retrain.backends.local.throughput import Shape, peak_flops
from retrain.backends.local.truncation import Truncation
from retrain.config.schema import TrainConfig
from retrain.errors import UserError


@dataclass
class Passes:
    rl: Layout
    sft: Layout
    packing: str  # "" when rows run packed, else why they run padded
    truncation: Truncation | None  # the in-process sampler's, applied to sampled tokens
    selective: bool
    compiled: CompiledHead | None
    shape: Shape
    peak: float  # the device's bf16 FLOP/s, 0 when unknown
    recompute: float  # share of the decoder layers that recompute their forward (checkpointing)
    latest: dict[str, float | int | str] = field(default_factory=dict)  # the latest update's metrics

    @classmethod
    def plan(cls, config: TrainConfig, options: LocalOptions, model: Any, *, packing: str, device: torch.device,
             checkpointed: int) -> Passes:
        """`packing`: `packing_refusal`'s answer for this model."""
        from retrain.backends.local.distributed import decoder_layers

        o, t = options, config.training
        layers = decoder_layers(model)
        _, head = split_head(model)
        if o.train_padding_free == "true" and packing:
            raise UserError(f"[backend.options] train_padding_free = true, but {config.model.model} cannot run "
                            f"packed rows here: {packing}", hint='train_padding_free = "auto"')
        packed = not packing
        sft_budget = o.train_sft_microbatch_token_budget or o.train_microbatch_token_budget
        compiled = None
        if o.train_compile_selective_ce != "off":
            if o.train_compile_selective_ce == "require" and device.type != "cuda":
                raise UserError("[backend.options] train_compile_selective_ce = \"require\" needs a CUDA device",
                                hint='train_compile_selective_ce = "auto" or "off"')
            compiled = CompiledHead(o.train_compile_selective_ce, o.train_compile_selective_ce_min_tokens)
        engine_truncates = config.inference.engine == "pytorch"
        return cls(rl=Layout(o.train_microbatch_token_budget, o.train_microbatch_size, packed),
                   sft=Layout(sft_budget, o.train_microbatch_size, packed), packing=packing,
                   truncation=Truncation.of(t.top_p, t.top_k, t.min_p, t.temperature) if engine_truncates else None,
                   selective=o.train_selective_suffix_logits, compiled=compiled,
                   shape=Shape.of(model, layers, head), peak=peak_flops(device),
                   recompute=checkpointed / max(len(layers), 1))

    def scoring(self, truncated: torch.Tensor | None, *, sampled: bool) -> Scoring:
        """How to score positions of which `truncated` (bool over them) were sampled (None: all
        were); `sampled` = False (supervised rows) never truncates."""
        rule = self.truncation if sampled else None
        return Scoring(truncation=rule, truncated=truncated if rule is not None else None,
                       selective=self.selective, compiled=self.compiled)

    def record(self, batch: Batch, parts: Sequence[Batch], wall_s: float, forwards: int) -> None:
        self.latest = {**self.metrics(batch, parts, wall_s, forwards), "train/packing": self.packing or "packed"}

    def take(self) -> dict[str, float | int | str]:
        """The latest update's metrics, once; the packed attention's calls since the last take."""
        from retrain.backends.local.attention import take_calls

        out, self.latest = self.latest, {}
        out.update({f"train/attention_{way}_calls": n for way, n in take_calls().items()})
        if self.compiled is not None:
            out.update({"train/compiled_head_batches": self.compiled.batches,
                        "train/compiled_head_fallback": self.compiled.fallback or "none"})
        return out

    def metrics(self, batch: Batch, parts: Sequence[Batch], wall_s: float, forwards: int) -> dict[str, float | int]:
        """A step's token accounting, `train_tokens_per_s` (the rows' tokens over the update's
        wall time) and, on a CUDA device in the peak table, `mfu`; `forwards` counts the
        forward passes without backward (a reference policy's, a selecting objective's)."""
        out: dict[str, float | int] = dict(token_metrics(batch, parts))
        out["train/packed"] = int(any(p.packed is not None for p in parts))
        out["train_tokens_per_s"] = round(out["train/tokens"] / wall_s, 1) if wall_s > 0 else 0.0
        if self.peak > 0 and wall_s > 0:
            flops = 0.0
            for p in parts:
                tokens = p.packed.tokens if p.packed is not None else p.rows * p.input_ids.shape[1]
                rows = p.lengths if p.packed is not None else [p.input_ids.shape[1]] * p.rows
                selected = int(p.action.sum()) + (int((p.echo > 0).sum()) if p.echo is not None else 0)
                flops += self.shape.flops(tokens, rows, selected, self.recompute, forwards)
            out["mfu"] = round(flops / (wall_s * self.peak), 6)
        return out


def packing_refusal(options: LocalOptions, model: Any, *, distributed: bool, device: torch.device) -> str:
    """"" when `model` trains packed rows, else why not (retrain.backends.local.attention.support).
    Called while the model is still all fp32 and outside autocast, so the probe compares exactly;
    on CUDA it also checks the varlen path that bf16 rows take there (attention.verify_varlen),
    which otherwise run through SDPA."""
    from retrain.backends.local import attention
    from retrain.backends.local.distributed import decoder_layers
    from retrain.inference_engine.pytorch.device import autocast_dtype

    if options.train_padding_free == "false":
        return "off"
    if distributed:
        return "several processes"
    refusal = attention.support(model, split_head(model)[0], len(decoder_layers(model)))
    if not refusal and (dtype := autocast_dtype(device)) is not None:
        attention.verify_varlen(device, dtype)
    return refusal
