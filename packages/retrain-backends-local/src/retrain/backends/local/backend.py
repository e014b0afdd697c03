"""The local backend: one transformers model (LoRA via peft, or full weights) on one device,
sampled with the batched PyTorch engine and trained with AdamW; under torchrun, one policy
sharded with FSDP2 across the world's processes (`local.distributed`)."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from retrain.backends.local import determinism, echo, micro, state
from retrain.backends.local.batch import Batch, collate, crop_context
from retrain.backends.local.logprobs import action_logprobs
from retrain.backends.local.lora import apply_lora, freeze_lora_a
from retrain.backends.local.loss import (
    PolicyLossConfig,
    kl_penalty,
    policy_loss,
    select_tokens,
    sft_loss,
)
from retrain.backends.local.memory import (
    Offload,
    configure_checkpointing,
    empty_cache,
    expandable_segments,
)
from retrain.backends.local.mismatch import Mismatch
from retrain.backends.local.options import LocalOptions
from retrain.backends.local.passes import Passes, packing_refusal
from retrain.backends.local.placement import place
from retrain.backends.local.precision import base_dtype, cast_frozen
from retrain.backends.local.publish import Publication
from retrain.backends.local.reference import Reference
from retrain.backends.local.replay import RoutingReplay
from retrain.backends.local.sync import MergedSampler
from retrain.backends.local.tally import PolicyTally
from retrain.backends.tokenizer import HFTokenizer
from retrain.config.schema import TrainConfig
from retrain.config.sft_loss import effective_sft_loss
from retrain.errors import UserError
from retrain.inference_engine.pytorch.device import autocast_dtype
from retrain.inference_engine.pytorch.sample import SampleStats, engine_metrics, generate
from retrain.models.dropout import disable_dropout, dropout_note
from retrain.models.families import family_of, prepare_family
from retrain.models.load import ModelSpec, load_model, load_tokenizer
from retrain.models.quiet import kernel_fallbacks
from retrain.models.tiny import from_tiny, is_tiny
from retrain.models.untrained import warn_if_untrained
from retrain.process.spans import span
from retrain.types import Completion, Datum, SamplingParams, TrainOutput


class LocalBackend:
    """Variants (the unsloth backend) override the `_load_base`, `_apply_lora`, `_place` and
    `_sampling_mode` hooks; loss, datums, sampling, sharding and checkpoints are shared."""

    #: route peft LoRA layers through retrain.kernels (a variant with its own kernels says no)
    patch_lora_kernels = True
    #: sample with retrain's own decoding forward where it runs the model (a variant with its
    #: own inference mode says no)
    own_decoder = True

    def __init__(self, config: TrainConfig, *, options: LocalOptions | None = None,
                 model_overrides: Mapping[str, Any] | None = None) -> None:
        """`options`: `[backend.options]` as read once by the factory (default: read from
        `config`). Setup runs in this order: the process (`placement`) before anything starts
        CUDA, the allocator's mode before the model allocates, the merged sampler's copy before
        LoRA wraps the model, sharding before the optimizer takes the parameters."""
        self.options = options if options is not None else LocalOptions.read(config.backend.options)
        self.decoder = self.options.sample_decoder if self.own_decoder else "transformers"
        where = place(config, self.options)
        self.world, self.device, self.cpu_threads, self.seed, self.mesh = \
            where.world, where.device, where.cpu_threads, where.seed, where.mesh
        if self.decoder == "retrain" and not self.options.sample_use_cache:
            raise UserError("[backend.options] sample_decoder = \"retrain\" needs sample_use_cache = true",
                            hint="set sample_decoder = \"transformers\" to decode without a KV cache")
        self._setup_memory()
        self._setup_model(config, model_overrides)
        self._setup_training(config)
        self.sample_stats = SampleStats()
        self.train_time_s = 0.0

    def _setup_memory(self) -> None:
        o = self.options
        self.memory_metrics: dict[str, int] = {}
        if self.device.type == "cuda":
            self.memory_metrics.update(expandable_segments(o.cuda_expandable_segments,
                                                           o.gradient_checkpointing_skip_last_n))
        self.offload = Offload(o.train_save_on_cpu, o.train_save_on_cpu_pin_memory, o.train_save_on_cpu_min_numel)

    def _setup_model(self, config: TrainConfig, model_overrides: Mapping[str, Any] | None) -> None:
        """The policy loaded, LoRA-wrapped, routed through retrain.kernels and placed; the
        merged sampler and the KL reference bound to it."""
        o, t = self.options, config.training
        spec = ModelSpec(config.model.model, config.model.revision, config.model.local_files_only,
                         o.trust_remote_code, tuple(sorted((model_overrides or {}).items())))
        model, tokenizer = self._load_base(config, spec)
        if not o.train_keep_dropout:  # before LoRA wraps the model: [lora] dropout is the user's own
            note = dropout_note(disable_dropout(model))
            if note and self.world.leader:
                print(note, file=sys.stderr)
        self.family = family_of(model.config)
        self.tokenizer = HFTokenizer(tokenizer, reads_instructions=not from_tiny(config.model.model))
        self.tokenizer.eos_token_ids = self.family.eos_token_ids(tokenizer, model, self.tokenizer.eos_token_ids)
        self.model_name = config.model.model
        self.max_context = int(getattr(model.config, "max_position_embeddings", 0) or 0)  # 0: not stated
        self.base_from_seed = is_tiny(config.model.model)
        self.lora = not o.train_full_model
        self.published = Publication(config, self.tokenizer, self.world, model, seed=self.seed, lora=self.lora)
        self.server = self.published.server
        self.sampler = None if self.published.ahead is not None else \
            self._merged_sampler(model, on_server=self.server is not None)
        self.frozen_lora_a = 0
        if self.lora:
            model = self._apply_lora(model, config)
            if o.lora_freeze_a:
                self.frozen_lora_a = freeze_lora_a(model)
        from retrain.kernels import (
            detach_lora_input,
            patch_peft_lora,
            reset_kernel_metrics,
            set_kernel_mode,
        )

        set_kernel_mode(o.kernels)
        reset_kernel_metrics()  # the record is process-wide: a run's first row counts only its own calls
        self.model = self._place(model)
        self.packing = packing_refusal(o, self.model, distributed=self.world.distributed,
                                       device=self.device)  # before bf16 below
        self.base_dtype = base_dtype(o.train_base_dtype if not self.world.distributed else "float32",
                                     self.device, lora=self.lora)
        if self.world.distributed and o.train_base_dtype == "bfloat16":
            raise UserError("train_base_dtype = \"bfloat16\" with several processes is not built yet in this "
                            "version (FSDP shards one dtype)", hint='train_base_dtype = "auto"')
        cast_frozen(self.model, self.base_dtype)
        self.family_metrics = prepare_family(self.family, self.model, dataclasses.asdict(o))
        fast = self.lora and self.patch_lora_kernels and o.lora_fast_linear
        self.fused_lora_layers = patch_peft_lora(self.model) if fast else 0
        self.detached_lora_layers = detach_lora_input(self.model) if self.lora and o.lora_detach_input else 0
        self.kl_coef, self.kl_estimator = t.kl_coef, t.kl_estimator
        self.reference = Reference(self.model, lora=self.lora) if t.kl_coef > 0 else None
        self.replay = RoutingReplay.of(config, self.family, self.model, self.reference, self.device)
        if self.sampler is not None:
            self.sampler.model.to(self.device)
            cast_frozen(self.sampler.model, self.base_dtype)  # it samples the base the policy trains on
            self.sampler.bind(self.model)
        self.published.bind(self.model, self.device)
        if self.device.type == "cuda":
            self.memory_metrics.update(configure_checkpointing(
                self.model, o.gradient_checkpointing, o.gradient_checkpointing_use_reentrant,
                o.gradient_checkpointing_skip_last_n))
        self.model.train()

    def _replaying(self, mb: Batch) -> contextlib.AbstractContextManager[Any]:
        """Around a micro-batch's forward and backward: its recorded routes replayed."""
        return self.replay.replaying(mb) if self.replay is not None else contextlib.nullcontext()

    def _merged_sampler(self, model: torch.nn.Module, *, on_server: bool) -> MergedSampler | None:
        """A copy of the base to sample from with LoRA merged in (`sample_merged_lora`; auto: on
        the CPU). Sharded weights are gathered for sampling (distributed.gathered) instead."""
        merged = self.options.sample_merged_lora
        if self.lora and not on_server and not self.world.distributed and (
                merged == "true" or (merged == "auto" and self.device.type == "cpu")):
            return MergedSampler(model)
        return None

    def _setup_training(self, config: TrainConfig) -> None:
        """Sharding, the optimizer over what is left trainable, the random streams, the loss."""
        t = config.training
        self.sharded_layers = 0
        self.root: torch.nn.Module | None = None  # the FSDP root of a multi-process run
        if self.world.distributed:
            from retrain.backends.local import distributed

            self.root, self.sharded_layers = distributed.shard(self.model, self.mesh, autocast_dtype(self.device))
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.trainable_parameters = sum(p.numel() for p in params)
        self.optimizer = torch.optim.AdamW(params, lr=t.lr, betas=(config.optimizer.beta1, config.optimizer.beta2),
                                           eps=config.optimizer.eps, weight_decay=t.weight_decay, foreach=True)
        # rank 0 draws the streams of a single-process run; rank r its own (ranks sample different prompts)
        self.sample_generator = torch.Generator(device=self.device).manual_seed(self._rank_seed(self.seed + 1))
        self.select_generator = torch.Generator().manual_seed(self.seed + 2)
        self.loss_config = PolicyLossConfig(
            mode=t.policy_loss_mode, level=t.importance_sampling_level, clip_eps=t.clip_eps,
            clip_eps_high=t.clip_eps_high, clip_ratio_c=t.clip_ratio_c, kl_cov_percent=t.kl_cov_percent,
            kl_cov_coef=t.kl_cov_coef, clip_cov_ratio=t.clip_cov_ratio, clip_cov_min=t.clip_cov_min,
            clip_cov_max=t.clip_cov_max, sapo_temperature_pos=t.sapo_temperature_pos,
            sapo_temperature_neg=t.sapo_temperature_neg, search_paths=tuple(config.plugins.search_paths))
        self.loss_aggregation = t.loss_aggregation
        self.max_tokens = t.max_tokens
        self.temperature = t.temperature if t.temperature > 0 else 1.0
        self.grad_clip = config.optimizer.grad_clip_norm
        self.sft_kind = effective_sft_loss(config)
        self.autocast = autocast_dtype(self.device)
        self.mismatch = Mismatch(config.inference.importance_sampling_correction,
                                 config.inference.importance_sampling_cap, config.inference.importance_sampling_mode)
        self.passes = Passes.plan(config, self.options, self.model, packing=self.packing, device=self.device,
                                  checkpointed=self.memory_metrics.get("local_checkpointed_layers", 0))

    # model construction (hooks of variants) ---------------------------------------------
    def _load_base(self, config: TrainConfig, spec: ModelSpec) -> tuple[torch.nn.Module, Any]:
        """(the base model on the CPU, its tokenizer); a checkpoint that looks untrained is
        named on stderr (retrain.models.untrained), the built-in `tiny` (and its exports) never."""
        model, tokenizer = load_model(spec, seed=self.seed), load_tokenizer(spec)
        if not from_tiny(spec.name):
            warn_if_untrained(model, tokenizer, spec.name)
        return model, tokenizer

    def _apply_lora(self, model: torch.nn.Module, config: TrainConfig) -> torch.nn.Module:
        o = self.options
        return apply_lora(model, rank=config.model.lora_rank, alpha=config.lora.alpha,
                          dropout=config.lora.dropout, targets=o.lora_target_modules,
                          layers=o.lora_layers_to_transform, layers_pattern=o.lora_layers_pattern,
                          resolve=lambda suffixes: self.family.lora_targets(model, suffixes))

    def _place(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.to(self.device)

    def _sampling_mode(self) -> contextlib.AbstractContextManager[Any]:
        """Entered around the in-process engine's generation."""
        return contextlib.nullcontext()

    def _rank_seed(self, seed: int) -> int:
        return seed + RANK_SEED_STRIDE * self.world.rank

    # sampling ---------------------------------------------------------------------------
    def checkpoint(self, name: str) -> None:
        """Publish the trained adapter to the inference server (as its latest) if it has changed
        since; with the in-process engine sampling reads the trained model directly."""
        self.published.latest(self.model)

    def publish(self, version: int, *, keep: int) -> None:
        """VersionedSampler (retrain.backends.local.publish)."""
        self.published.publish(self.model, version, keep)

    @property
    def leader_samples(self) -> bool:
        """LeaderSampler: on several processes, an inference server's samples are drawn by rank 0."""
        return self.world.distributed and self.server is not None

    def broadcast(self, obj: Any) -> Any:
        from retrain.backends.local import distributed

        return distributed.broadcast(obj, self.world)

    def sample(self, prompts: Sequence[Sequence[int]], num_samples: int,
               params: SamplingParams) -> list[list[Completion]]:
        """A seeded call (evaluation) draws from its own generator and counts into throwaway
        stats with kernel calls unrecorded, so the training stream and the step's counters
        are untouched. On an inference server a seeded call seeds its requests from its seed."""
        try:
            return self._sample(prompts, num_samples, params)
        finally:
            empty_cache(self.device, self.options.cuda_empty_cache)

    def _sample(self, prompts: Sequence[Sequence[int]], num_samples: int,
                params: SamplingParams) -> list[list[Completion]]:
        if self.server is not None:
            return self.published.sample_server(self.model, prompts, num_samples, params)
        ahead = self.published.ahead
        if ahead is not None and params.policy_version is not None:
            model, generator = ahead.prepare(params, self.device)
            return self._generate(prompts, num_samples, params, generator, self.sample_stats, model=model)
        if self.world.distributed:
            return self._sample_shared(prompts, num_samples, params)
        if params.seed is None:
            return self._generate(prompts, num_samples, params, self.sample_generator, self.sample_stats)
        from retrain.kernels import unrecorded

        generator = torch.Generator(device=self.device).manual_seed(params.seed)
        with unrecorded():
            return self._generate(prompts, num_samples, params, generator, SampleStats())

    def _sample_shared(self, prompts: Sequence[Sequence[int]], num_samples: int,
                       params: SamplingParams) -> list[list[Completion]]:
        """This rank's share of the prompts (whole groups), every rank's completions back."""
        from retrain.backends.local import distributed
        from retrain.kernels import unrecorded

        assert self.root is not None
        mine = [prompts[i] for i in distributed.share(len(prompts), self.world)]
        local: list[list[Completion]] = []
        seed = params.seed
        with distributed.gathered(self.root):
            if mine and seed is None:
                local = self._generate(mine, num_samples, params, self.sample_generator, self.sample_stats)
            elif mine and seed is not None:
                generator = torch.Generator(device=self.device).manual_seed(self._rank_seed(seed))
                with unrecorded():
                    local = self._generate(mine, num_samples, params, generator, SampleStats())
        return [groups for part in distributed.gather(local, self.world) for groups in part]

    def _generate(self, prompts: Sequence[Sequence[int]], num_samples: int, params: SamplingParams,
                  generator: torch.Generator, stats: SampleStats,
                  model: torch.nn.Module | None = None) -> list[list[Completion]]:
        """The engine samples `model` (default: the trained weights) in eval mode with the KV
        cache whatever mode training left the model in, and restores it
        (inference_engine.pytorch.sample)."""
        if model is None:
            model = self.model
            if self.sampler is not None:
                self.sampler.refresh()
                model = self.sampler.model
        with self._sampling_mode(), self._autocast():
            return generate(model, prompts, num_samples, params, self.tokenizer.eos_token_ids,
                            self.tokenizer.pad_token_id, generator, use_cache=self.options.sample_use_cache,
                            stats=stats, decoder=self.decoder, cuda_graphs=self.options.sample_cuda_graphs,
                            record_routes=self.replay is not None)

    # training ---------------------------------------------------------------------------
    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast)

    def _set_hyper(self, lr: float, weight_decay: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
            group["weight_decay"] = weight_decay

    def _new_logprobs(self, mb: Batch, positions: torch.Tensor | None = None,
                      model: torch.nn.Module | None = None, *, sampled: bool = True) -> torch.Tensor:
        """Logprobs at `positions` (default: the sampled tokens) under the policy, or `model`.
        Sampled tokens are scored under the sampler's truncation (local.truncation); `sampled`
        = False (supervised rows) scores every position over the whole vocabulary."""
        chunk = self.options.train_logprob_chunk_size
        where = mb.action if positions is None else positions
        scoring = self.passes.scoring(None if positions is None else mb.action[where], sampled=sampled)
        with self._autocast():
            if model is None and self.root is not None:
                return self.root(mb.input_ids, mb.attention_mask, where, self.temperature, chunk, scoring=scoring)
            return action_logprobs(self.model if model is None else model, mb.input_ids, mb.attention_mask, where,
                                   self.temperature, chunk, packed=mb.packed, scoring=scoring)

    def _sync(self) -> None:
        """Wait for the device's queued kernels, so a timing span holds their time (CUDA only)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _step(self, grad_norm_out: dict[str, float | int | str]) -> None:
        if self.grad_clip > 0:
            params = [p for g in self.optimizer.param_groups for p in g["params"]]
            norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip)
            grad_norm_out["grad_norm"] = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _micro_batches(self, batch: Batch, layout: micro.Layout) -> list[tuple[Batch, bool]]:
        """(micro-batch, real): the whole batch's (local.micro), or this rank's share in as many
        micro-batches as every other rank's (a stand-in of zero weight where its rows run out)."""
        if not self.world.distributed:
            return [(mb, True) for mb in micro.micro_batches(batch, layout)]
        from retrain.backends.local import distributed

        return distributed.rank_micro_batches(batch, self.options.train_microbatch_size, self.world)

    def _packed(self, mb: Batch) -> contextlib.AbstractContextManager[Any]:
        """Packed rows' attention (local.attention) around a micro-batch's forward and backward:
        checkpointed layers run their forward again in the backward."""
        from retrain.backends.local.attention import packed

        return packed(self.model) if mb.packed is not None else contextlib.nullcontext()

    def _finish_update(self, batch: Batch, parts: list[tuple[Batch, bool]], t0: float, forwards: int) -> None:
        """The update's token and throughput metrics, for the next `runtime_metrics`."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the wall time of work done, not of work queued
        wall = time.perf_counter() - t0
        self.train_time_s += wall
        self.passes.record(batch, [mb for mb, real in parts if real], wall, forwards)

    def train_step(self, datums: Sequence[Datum], lr: float, weight_decay: float) -> TrainOutput:
        """One AdamW update on the policy loss of `datums` (aggregated as configured), plus
        ECHO's auxiliary term where datums carry ECHO weights (retrain.backends.local.echo)."""
        t0 = time.perf_counter()
        self._set_hyper(lr, weight_decay)
        self.optimizer.zero_grad(set_to_none=True)
        try:
            out, batch, parts = self._policy_pass(datums)
            if out.tokens == 0 and not out.metrics.get("echo/tokens"):
                return out
            with span("optimizer", self._sync):
                self._step(out.metrics)
        finally:
            empty_cache(self.device, self.options.cuda_empty_cache)
        self.published.trained()
        self._finish_update(batch, parts, t0, int(self.reference is not None) + self.loss_config.needs_selection)
        return out

    def policy_gradients(self, datums: Sequence[Datum]) -> TrainOutput:
        """The policy loss of `datums`, its gradient accumulated into the trainable
        parameters' `.grad` micro-batch by micro-batch; no optimizer step."""
        return self._policy_pass(datums)[0]

    def _policy_pass(self, datums: Sequence[Datum]) -> tuple[TrainOutput, Batch, list[tuple[Batch, bool]]]:
        if self.replay is not None:
            self.replay.check(datums)
        datums, crop = crop_context(datums, self.options.train_supervised_context_tokens)
        batch = collate(datums, self.tokenizer.pad_token_id, self.device, aggregation=self.loss_aggregation,
                        max_tokens=self.max_tokens)
        total = batch.action_tokens
        echo_tokens = echo.tokens(batch.echo)
        if total == 0 and echo_tokens == 0:
            return TrainOutput(loss=0.0, tokens=0), batch, []
        parts = self._micro_batches(batch, self.passes.rl)
        selected = self._selected_tokens(batch, [mb for mb, _ in parts]) if self.loss_config.needs_selection \
            else None
        tally = PolicyTally()
        for mb, real in parts:
            # offload: CUDA's activations to the CPU
            with self.offload.context(self.device), self._packed(mb), self._replaying(mb):
                self._micro_batch_gradients(mb, real, selected, tally)
        if self.world.distributed:
            tally.sum_ranks(self.device)
        metrics: dict[str, float | int | str] = dict(self.published.stale_gap.metrics(
            datums, self.mismatch.metrics(), self.model, self._recomputed))
        metrics.update(tally.metrics(total, echo_tokens, reference=self.reference is not None))
        metrics.update(crop)
        self.mismatch = self.mismatch.fresh()
        return TrainOutput(loss=tally.loss, tokens=total, metrics=metrics), batch, parts

    @torch.no_grad()
    def _recomputed(self, datums: Sequence[Datum]) -> tuple[torch.Tensor, torch.Tensor]:
        """(the trained model's logprobs of the datums' sampled tokens, the sampler's), flat."""
        parts = micro.micro_batches(collate(datums, self.tokenizer.pad_token_id, self.device),
                                    micro.Layout(max_rows=self.options.train_microbatch_size))
        return (torch.cat([self._replayed_logprobs(mb) for mb in parts]),
                torch.cat([mb.old_logprobs[mb.action].float() for mb in parts]))

    def _replayed_logprobs(self, mb: Batch) -> torch.Tensor:
        with self._replaying(mb):
            return self._new_logprobs(mb).float()

    def _selected_tokens(self, batch: Batch, parts: list[Batch]) -> torch.Tensor:
        """[B, L-1]: the tokens a selecting objective (KL-Cov, Clip-Cov) trains on, chosen over
        the whole batch before any micro-batch's backward."""
        with torch.no_grad():
            new_all = micro.scatter(batch, parts, [self._replayed_logprobs(mb) for mb in parts])
        anchor_all, _ = self.mismatch.fresh().anchor(new_all, batch.old_logprobs[batch.action],
                                                     batch.action.nonzero()[:, 0])
        chosen = torch.zeros_like(batch.action)
        chosen[batch.action] = select_tokens(self.loss_config, new_all, anchor_all,
                                             batch.advantages[batch.action], self.select_generator)
        return chosen

    def _micro_batch_gradients(self, mb: Batch, real: bool, selected: torch.Tensor | None,
                               tally: PolicyTally) -> None:
        """Backward of one micro-batch's loss (counted in `tally` when `real`); `selected`
        [B, L-1] marks the step's tokens a selecting objective picked."""
        with span("forward", self._sync):
            new, aux = echo.split(self._new_logprobs(mb, echo.positions(mb.action, mb.echo)).float(),
                                  mb.action, mb.echo)
            n = new.numel()
            if n == 0 and aux is None:
                return
            loss = aux if aux is not None else new.new_zeros(())
            if aux is not None and real:
                tally.echo += float(aux.detach())
            if n:
                sel = micro.pick(selected, mb) if selected is not None else None
                loss = loss + self._token_loss(mb, new, sel, real, tally)
        with span("backward", self._sync):
            (loss * self.world.size).backward()  # FSDP averages gradients over ranks
        if real:
            tally.loss += float(loss.detach())

    def _token_loss(self, mb: Batch, new: torch.Tensor, selected: torch.Tensor | None, real: bool,
                    tally: PolicyTally) -> torch.Tensor:
        """The weighted policy loss (plus the reference KL penalty) summed over `mb`'s action tokens."""
        rows = mb.action.nonzero()[:, 0]  # [n] each action token's row
        anchor, is_weight = self.mismatch.anchor(new, mb.old_logprobs[mb.action], rows, record=real)
        res = policy_loss(self.loss_config, new, anchor, mb.advantages[mb.action], selected, rows)
        per_token = res.per_token if is_weight is None else res.per_token * is_weight
        if self.reference is not None:
            ref = self.reference.logprobs(self.model, lambda m: self._new_logprobs(mb, model=m))
            penalty = kl_penalty(self.kl_estimator, new, ref)
            # weighted by the policy ratio (the sequence's at sequence level), as TRL's
            # use_bias_correction_kl does
            per_token = per_token + self.kl_coef * penalty * res.ratio
            if real:
                tally.add_reference(penalty)
        if real:
            tally.add_tokens(res, new.numel())
        return (per_token * mb.weight[mb.action]).sum()

    def sft_step(self, datums: Sequence[Datum], lr: float, weight_decay: float) -> TrainOutput:
        """One AdamW update on the supervised loss; positive advantages weight target tokens."""
        t0 = time.perf_counter()
        datums, crop = crop_context(datums, self.options.train_supervised_context_tokens)
        batch = collate(datums, self.tokenizer.pad_token_id, self.device)
        weight_all = batch.advantages.clamp_min(0) * batch.action
        total = int((weight_all > 0).sum())
        if total == 0:
            return TrainOutput(loss=0.0, tokens=0)
        self._set_hyper(lr, weight_decay)
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        parts = self._micro_batches(batch, self.passes.sft)
        for mb, real in parts:
            with self.offload.context(self.device), self._packed(mb):  # offload: CUDA's activations to the CPU
                with span("forward", self._sync):
                    new = self._new_logprobs(mb, sampled=False).float()
                    if new.numel() == 0:
                        continue
                    w = mb.advantages[mb.action].clamp_min(0) * real
                    loss = sft_loss(self.sft_kind, new, w).sum() / total
                with span("backward", self._sync):
                    (loss * self.world.size).backward()  # FSDP averages gradients over ranks
                loss_sum += float(loss.detach())
        if self.world.distributed:
            from retrain.backends.local import distributed

            loss_sum = distributed.sum_floats((loss_sum,), self.device)[0]
        metrics: dict[str, float | int | str] = {"sft/micro_batches": len(parts), **crop}
        with span("optimizer", self._sync):
            self._step(metrics)
        empty_cache(self.device, self.options.cuda_empty_cache)
        self.published.trained()
        self._finish_update(batch, parts, t0, 0)
        return TrainOutput(loss=loss_sum, tokens=total, metrics=metrics)

    def save_checkpoint(self, path: str) -> str:
        # `model` as the config names it ("tiny", a hub id, a folder, a GGUF): what retrain export loads
        meta = {"seed": self.seed, "model": self.model_name,
                "trainable_parameters": self.trainable_parameters}
        return state.save_checkpoint(path, model=self.model, optimizer=self.optimizer, lora=self.lora,
                                     world=self.world, rng=self._rng_state(), meta=meta,
                                     extra=self.published.save)

    def _rng_state(self) -> dict[str, Any]:
        return state.rng_state(self.device, self.sample_generator, self.select_generator)

    def load_checkpoint(self, path: str) -> None:
        if self.base_from_seed:
            state.check_seed(path, seed=self.seed, model_name=self.model_name)
        rng = state.load_checkpoint(path, model=self.model, optimizer=self.optimizer, lora=self.lora,
                                    world=self.world)
        state.restore_rng(rng, self.device, self.sample_generator, self.select_generator)
        self.published.restore(Path(path), self.model)

    def load_teacher(self, config: TrainConfig) -> Any:
        """TeacherHost: the `[teacher] model` beside this policy (retrain.backends.local.teacher)."""
        from retrain.backends.local.teacher import load_teacher

        return load_teacher(config, student_tokenizer=self.tokenizer.hf, device=self.device, seed=self.seed,
                            trust_remote_code=self.options.trust_remote_code)

    def load_adapter(self, path: str) -> None:
        """Trained weights alone, for evaluation: the optimizer and the RNG streams are left as
        they are."""
        state.load_adapter(path, model=self.model, lora=self.lora, world=self.world)

    def save_adapter(self, path: str) -> str:
        return state.save_adapter(path, model=self.model, lora=self.lora, world=self.world)

    def runtime_metrics(self) -> dict[str, float | int | str]:
        """Counters since the previous call (one step), so they survive a resume unchanged."""
        from retrain.kernels import kernel_metrics

        s = self.sample_stats
        self.sample_stats = SampleStats()
        engine: dict[str, float | int | str] = engine_metrics(s) if self.server is None else self.server.metrics()
        return {
            **engine,
            "local_trainable_parameters": self.trainable_parameters,
            "local_device": str(self.device),
            "local_cpu_threads": self.cpu_threads,
            "local_fused_lora_layers": self.fused_lora_layers,
            "local_sharded_layers": self.sharded_layers,
            "local_frozen_lora_a": self.frozen_lora_a,
            "local_detached_lora_layers": self.detached_lora_layers,
            **self.memory_metrics,
            **self.family_metrics,
            **kernel_fallbacks(),
            **self.offload.take(),
            **determinism.proof(),
            **kernel_metrics(reset=True),
            **self.passes.take(),
            **(self.replay.metrics() if self.replay is not None else {}),
        }

    def close(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.published.close()
        if self.world.distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


#: seeds of rank r's streams are the single-process seeds plus r times this
RANK_SEED_STRIDE = 1_000_003
