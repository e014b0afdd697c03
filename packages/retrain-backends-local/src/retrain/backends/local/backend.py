"""The local backend: one transformers model (LoRA via peft, or full weights) on one device,
sampled with the batched PyTorch engine and trained with AdamW; under torchrun, one policy
sharded with FSDP2 across the world's processes (`local.distributed`)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from retrain.backends.local import determinism, echo
from retrain.backends.local.batch import Batch, collate, micro_batches, token_budget_micro_batches
from retrain.backends.local.checkpointing import (
    load_weights,
    read_checkpoint,
    read_weights,
    save_weights,
    weights_folder,
    write_checkpoint,
    write_dir_atomic,
)
from retrain.backends.local.device import autocast_dtype, plan_device, rank_device
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
from retrain.backends.local.reference import Reference
from retrain.backends.local.server import ServerLink
from retrain.backends.local.sync import MergedSampler
from retrain.backends.options import expandable_mode
from retrain.backends.seeds import request_seeds
from retrain.backends.tokenizer import HFTokenizer
from retrain.config.schema import TrainConfig
from retrain.config.sft_loss import effective_sft_loss
from retrain.errors import UserError
from retrain.inference_engine.pytorch.sample import SampleStats, engine_metrics, generate
from retrain.models.load import ModelSpec, load_model, load_tokenizer
from retrain.models.tiny import is_tiny
from retrain.process.cpus import cpu_threads
from retrain.process.world import current_world
from retrain.types import Completion, Datum, SamplingParams, TrainOutput


class LocalBackend:
    """Variants (the unsloth backend) override the `_load_base`, `_apply_lora`, `_place` and
    `_sampling_mode` hooks; loss, datums, sampling, sharding and checkpoints are shared."""

    #: route peft LoRA layers through retrain.kernels (a variant with its own kernels says no)
    patch_lora_kernels = True
    #: sample with retrain's own decoding forward where it runs the model (a variant with its
    #: own inference mode says no)
    own_decoder = True

    def __init__(self, config: TrainConfig, *, model_overrides: Mapping[str, Any] | None = None) -> None:
        t, opts = config.training, config.backend.options
        self.strict = bool(opts.get("strict_deterministic", False))
        if self.strict:  # before anything starts CUDA
            determinism.prepare()
        else:
            determinism.refuse_after_strict()
        self.world = current_world()
        on_server = config.inference.engine != "pytorch"
        if self.world.distributed:
            _refuse_distributed(config, self.world.size)
        self.device = rank_device(config.backend.devices, self.world) if self.world.distributed \
            else plan_device(config.backend.devices)
        self.cpu_threads = 0
        if self.device.type == "cpu":
            self.cpu_threads, _ = cpu_threads(int(opts.get("cpu_threads", 0)),
                                              processes=int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
            torch.set_num_threads(self.cpu_threads)
        self.seed = t.seed if t.seed >= 0 else int.from_bytes(os.urandom(4), "little")
        self.mesh = None
        if self.world.distributed:
            from retrain.backends.local import distributed

            self.mesh = distributed.init_mesh(self.world, self.device)
            self.seed = distributed.gather(self.seed, self.world)[0]  # rank 0's seed (random when unset)
        if self.strict:
            determinism.establish()
        torch.manual_seed(self.seed)
        skip_last_n = int(opts.get("gradient_checkpointing_skip_last_n", 0))
        self.memory_metrics: dict[str, int] = {}
        if self.device.type == "cuda":
            self.memory_metrics.update(expandable_segments(expandable_mode(opts.get("cuda_expandable_segments", "auto")),
                                                           skip_last_n))
        self.empty_cache = bool(opts.get("cuda_empty_cache", True))
        self.offload = Offload(bool(opts.get("train_save_on_cpu", False)),
                               bool(opts.get("train_save_on_cpu_pin_memory", True)),
                               int(opts.get("train_save_on_cpu_min_numel", 0)))
        spec = ModelSpec(config.model.model, config.model.revision, config.model.local_files_only,
                         bool(opts.get("trust_remote_code", False)), tuple(sorted((model_overrides or {}).items())))
        model, tokenizer = self._load_base(config, spec)
        self.tokenizer = HFTokenizer(tokenizer)
        self.model_name = config.model.model
        self.max_context = int(getattr(model.config, "max_position_embeddings", 0) or 0)  # 0: not stated
        self.base_from_seed = is_tiny(config.model.model)
        self.lora = not bool(opts.get("train_full_model", False))
        merged = str(opts.get("sample_merged_lora", "auto"))
        self.sampler: MergedSampler | None = None
        # sharded weights are gathered for sampling (distributed.gathered), not merged into a copy
        if self.lora and not on_server and not self.world.distributed and (
                merged == "true" or (merged == "auto" and self.device.type == "cpu")):
            self.sampler = MergedSampler(model)
        self.frozen_lora_a = 0
        if self.lora:
            model = self._apply_lora(model, config)
            if opts.get("lora_freeze_a", False):
                self.frozen_lora_a = freeze_lora_a(model)
        from retrain.kernels import (
            detach_lora_input,
            patch_peft_lora,
            reset_kernel_metrics,
            set_kernel_mode,
        )

        set_kernel_mode(str(opts.get("kernels", "auto")))
        reset_kernel_metrics()  # the record is process-wide: a run's first row counts only its own calls
        self.model = self._place(model)
        self.fused_lora_layers = patch_peft_lora(self.model) if self.lora and self.patch_lora_kernels else 0
        self.detached_lora_layers = detach_lora_input(self.model) if self.lora and opts.get("lora_detach_input") else 0
        self.kl_coef, self.kl_estimator = t.kl_coef, t.kl_estimator
        self.reference = Reference(self.model, lora=self.lora) if t.kl_coef > 0 else None
        if self.sampler is not None:
            self.sampler.model.to(self.device)
            self.sampler.bind(self.model)
        if self.device.type == "cuda":
            self.memory_metrics.update(configure_checkpointing(
                self.model, bool(opts.get("gradient_checkpointing", True)),
                str(opts.get("gradient_checkpointing_use_reentrant", "auto")), skip_last_n))
        self.model.train()
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
            sapo_temperature_neg=t.sapo_temperature_neg)
        self.loss_aggregation = t.loss_aggregation
        self.max_tokens = t.max_tokens
        self.temperature = t.temperature if t.temperature > 0 else 1.0
        self.microbatch = int(opts.get("train_microbatch_size", 0))
        self.sft_token_budget = int(opts.get("train_sft_microbatch_token_budget", 0))
        if self.sft_token_budget > 0 and self.world.distributed:
            raise UserError("train_sft_microbatch_token_budget with several processes is not built yet in this "
                            "version", hint="use train_microbatch_size")
        self.chunk = int(opts.get("train_logprob_chunk_size", 0))
        self.use_cache = bool(opts.get("sample_use_cache", True))
        self.decoder = str(opts.get("sample_decoder", "auto")) if self.own_decoder else "transformers"
        self.cuda_graphs = bool(opts.get("sample_cuda_graphs", True))
        if self.decoder == "retrain" and not self.use_cache:
            raise UserError("[backend.options] sample_decoder = \"retrain\" needs sample_use_cache = true",
                            hint="set sample_decoder = \"transformers\" to decode without a KV cache")
        self.grad_clip = config.optimizer.grad_clip_norm
        self.sft_kind = effective_sft_loss(config)
        self.autocast = autocast_dtype(self.device)
        self.sample_stats = SampleStats()
        self.train_time_s = 0.0
        self.mismatch = Mismatch(config.inference.importance_sampling_correction,
                                 config.inference.importance_sampling_cap, config.inference.importance_sampling_mode)
        self.server: ServerLink | None = None
        self.stale = False  # the server samples from older weights than the trained ones
        if on_server:
            self.server = ServerLink(config, self.tokenizer)
            self.server.publish(self.model)

    # model construction (hooks of variants) ---------------------------------------------
    def _load_base(self, config: TrainConfig, spec: ModelSpec) -> tuple[torch.nn.Module, Any]:
        """(the base model on the CPU, its tokenizer)."""
        return load_model(spec, seed=self.seed), load_tokenizer(spec)

    def _apply_lora(self, model: torch.nn.Module, config: TrainConfig) -> torch.nn.Module:
        opts = config.backend.options
        return apply_lora(model, rank=config.model.lora_rank, alpha=config.lora.alpha,
                          dropout=config.lora.dropout, targets=str(opts.get("lora_target_modules", "")),
                          layers=str(opts.get("lora_layers_to_transform", "")),
                          layers_pattern=str(opts.get("lora_layers_pattern", "layers")))

    def _place(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.to(self.device)

    def _sampling_mode(self) -> contextlib.AbstractContextManager[Any]:
        """Entered around the in-process engine's generation."""
        return contextlib.nullcontext()

    def _rank_seed(self, seed: int) -> int:
        return seed + RANK_SEED_STRIDE * self.world.rank

    # sampling ---------------------------------------------------------------------------
    def checkpoint(self, name: str) -> None:
        """Publish the trained adapter to the inference server if it has changed since; with the
        in-process engine sampling reads the trained model directly."""
        if self.server is not None and self.stale:
            self.server.publish(self.model)
            self.stale = False

    def sample(self, prompts: Sequence[Sequence[int]], num_samples: int,
               params: SamplingParams) -> list[list[Completion]]:
        """A seeded call (evaluation) draws from its own generator and counts into throwaway
        stats with kernel calls unrecorded, so the training stream and the step's counters
        are untouched. On an inference server a seeded call seeds its requests from its seed."""
        try:
            return self._sample(prompts, num_samples, params)
        finally:
            empty_cache(self.device, self.empty_cache)

    def _sample(self, prompts: Sequence[Sequence[int]], num_samples: int,
                params: SamplingParams) -> list[list[Completion]]:
        if self.server is not None:
            if params.want_entropy:
                raise RuntimeError("an inference server returns no token entropies (want_entropy)")
            batch = params.seed if params.seed is not None else params.batch_id
            return self.server.sample(prompts, num_samples, params, request_seeds(self.seed, batch, len(prompts)))
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
                  generator: torch.Generator, stats: SampleStats) -> list[list[Completion]]:
        """The engine samples in eval mode with the KV cache whatever mode training left the
        model in, and restores it (inference_engine.pytorch.sample)."""
        model = self.model
        if self.sampler is not None:
            self.sampler.refresh()
            model = self.sampler.model
        with self._sampling_mode(), self._autocast():
            return generate(model, prompts, num_samples, params, self.tokenizer.eos_token_ids,
                            self.tokenizer.pad_token_id, generator, use_cache=self.use_cache, stats=stats,
                            decoder=self.decoder, cuda_graphs=self.cuda_graphs)

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
                      model: torch.nn.Module | None = None) -> torch.Tensor:
        """Logprobs at `positions` (default: the sampled tokens) under the policy, or `model`."""
        with self._autocast():
            where = mb.action if positions is None else positions
            if model is None and self.root is not None:
                return self.root(mb.input_ids, mb.attention_mask, where, self.temperature, self.chunk)
            return action_logprobs(self.model if model is None else model, mb.input_ids, mb.attention_mask, where,
                                   self.temperature, self.chunk)

    def _step(self, grad_norm_out: dict[str, float | int | str]) -> None:
        if self.grad_clip > 0:
            params = [p for g in self.optimizer.param_groups for p in g["params"]]
            norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip)
            grad_norm_out["grad_norm"] = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _micro_batches(self, batch: Batch) -> list[tuple[Batch, bool]]:
        """(micro-batch, real): the whole batch's, or this rank's share in as many micro-batches
        as every other rank's (a stand-in of zero weight where its rows run out)."""
        if not self.world.distributed:
            return [(mb, True) for mb in micro_batches(batch, self.microbatch)]
        from retrain.backends.local import distributed

        return distributed.rank_micro_batches(batch, self.microbatch, self.world)

    def train_step(self, datums: Sequence[Datum], lr: float, weight_decay: float) -> TrainOutput:
        """One AdamW update on the policy loss of `datums` (aggregated as configured), plus
        ECHO's auxiliary term where datums carry ECHO weights (retrain.backends.local.echo)."""
        t0 = time.perf_counter()
        self._set_hyper(lr, weight_decay)
        self.optimizer.zero_grad(set_to_none=True)
        try:
            out = self.policy_gradients(datums)
            if out.tokens == 0 and not out.metrics.get("echo/tokens"):
                return out
            self._step(out.metrics)
        finally:
            empty_cache(self.device, self.empty_cache)
        self.stale = True
        self.train_time_s += time.perf_counter() - t0
        return out

    def policy_gradients(self, datums: Sequence[Datum]) -> TrainOutput:
        """The policy loss of `datums`, its gradient accumulated into the trainable
        parameters' `.grad` micro-batch by micro-batch; no optimizer step."""
        batch = collate(datums, self.tokenizer.pad_token_id, self.device, aggregation=self.loss_aggregation,
                        max_tokens=self.max_tokens)
        total = batch.action_tokens
        echo_tokens = echo.tokens(batch.echo)
        if total == 0 and echo_tokens == 0:
            return TrainOutput(loss=0.0, tokens=0)
        selected = None
        if self.loss_config.needs_selection:
            with torch.no_grad():
                new_all = torch.cat([self._new_logprobs(mb).float() for mb in micro_batches(batch, self.microbatch)])
            anchor_all, _ = self.mismatch.fresh().anchor(new_all, batch.old_logprobs[batch.action],
                                                         batch.action.nonzero()[:, 0])
            selected = select_tokens(self.loss_config, new_all, anchor_all,
                                     batch.advantages[batch.action], self.select_generator)
        loss_sum, clip, cov, kl, echo_sum = 0.0, 0.0, 0.0, 0.0, 0.0
        ref_kl_sum, ref_kl_max = 0.0, float("-inf")
        offset = 0
        for mb, real in self._micro_batches(batch):
            with self.offload.context(self.device):  # saved activations wait in CPU memory (CUDA)
                new, aux = echo.split(self._new_logprobs(mb, echo.positions(mb.action, mb.echo)).float(),
                                      mb.action, mb.echo)
                n = new.numel()
                if n == 0 and aux is None:
                    continue
                loss = aux if aux is not None else new.new_zeros(())
                if aux is not None and real:
                    echo_sum += float(aux.detach())
                if n:
                    sel = selected[offset:offset + n] if selected is not None else None
                    offset += n
                    rows = mb.action.nonzero()[:, 0]  # [n] each action token's row
                    anchor, is_weight = self.mismatch.anchor(new, mb.old_logprobs[mb.action], rows, record=real)
                    res = policy_loss(self.loss_config, new, anchor, mb.advantages[mb.action], sel, rows)
                    per_token = res.per_token if is_weight is None else res.per_token * is_weight
                    if self.reference is not None:
                        ref = self.reference.logprobs(self.model, lambda m, mb=mb: self._new_logprobs(mb, model=m))  # type: ignore[misc]
                        penalty = kl_penalty(self.kl_estimator, new, ref)
                        # weighted by the policy ratio (the sequence's at sequence level), as TRL's
                        # use_bias_correction_kl does
                        per_token = per_token + self.kl_coef * penalty * res.ratio
                        if real:
                            ref_kl_sum += float(penalty.detach().sum())
                            ref_kl_max = max(ref_kl_max, float(penalty.detach().max()))
                    loss = loss + (per_token * mb.weight[mb.action]).sum()
                    if real:
                        clip += res.clip_fraction * n
                        cov += res.cov_fraction * n
                        kl += res.abs_kl * n
                (loss * self.world.size).backward()  # FSDP averages gradients over ranks
                if real:
                    loss_sum += float(loss.detach())
        if self.world.distributed:
            from retrain.backends.local import distributed

            loss_sum, clip, cov, kl, echo_sum = distributed.sum_floats((loss_sum, clip, cov, kl, echo_sum), self.device)
        metrics: dict[str, float | int | str] = dict(self.mismatch.metrics())
        if echo_tokens:
            metrics.update({"echo/loss": echo_sum, "echo/tokens": echo_tokens})
        self.mismatch = self.mismatch.fresh()
        denom = max(total, 1)
        metrics.update({"clip_fraction": clip / denom, "policy/cov_fraction": cov / denom, "policy/abs_kl": kl / denom})
        if self.reference is not None:
            metrics.update({"kl/mean": ref_kl_sum / denom, "kl/max": ref_kl_max})
        return TrainOutput(loss=loss_sum, tokens=total, metrics=metrics)

    def sft_step(self, datums: Sequence[Datum], lr: float, weight_decay: float) -> TrainOutput:
        """One AdamW update on the supervised loss; positive advantages weight target tokens."""
        t0 = time.perf_counter()
        batch = collate(datums, self.tokenizer.pad_token_id, self.device)
        weight_all = batch.advantages.clamp_min(0) * batch.action
        total = int((weight_all > 0).sum())
        if total == 0:
            return TrainOutput(loss=0.0, tokens=0)
        self._set_hyper(lr, weight_decay)
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        parts = self._micro_batches(batch) if self.sft_token_budget <= 0 else \
            [(mb, True) for mb in token_budget_micro_batches(batch, self.sft_token_budget, self.microbatch)]
        for mb, real in parts:
            with self.offload.context(self.device):  # saved activations wait in CPU memory (CUDA)
                new = self._new_logprobs(mb).float()
                if new.numel() == 0:
                    continue
                w = mb.advantages[mb.action].clamp_min(0) * real
                loss = sft_loss(self.sft_kind, new, w).sum() / total
                (loss * self.world.size).backward()  # FSDP averages gradients over ranks
                loss_sum += float(loss.detach())
        if self.world.distributed:
            from retrain.backends.local import distributed

            loss_sum = distributed.sum_floats((loss_sum,), self.device)[0]
        metrics: dict[str, float | int | str] = {"sft/micro_batches": len(parts)}
        self._step(metrics)
        empty_cache(self.device, self.empty_cache)
        self.stale = True
        self.train_time_s += time.perf_counter() - t0
        return TrainOutput(loss=loss_sum, tokens=total, metrics=metrics)

    # state ------------------------------------------------------------------------------
    def _rng_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "torch": torch.get_rng_state(),
            "sample": self.sample_generator.get_state(),
            "select": self.select_generator.get_state(),
        }
        if self.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        return state

    def save_checkpoint(self, path: str) -> str:
        meta = {"seed": self.seed, "model": str(getattr(self.model, "name_or_path", "")),
                "trainable_parameters": self.trainable_parameters}
        if self.world.distributed:
            return self._save_shared(path, meta)
        return str(write_checkpoint(path, model=self.model, lora=self.lora, optimizer=self.optimizer,
                                    rng=self._rng_state(), meta=meta,
                                    extra=self.server.save_into if self.server is not None else None))

    def _save_shared(self, path: str, meta: dict[str, Any]) -> str:
        """Gather full weights, optimizer state and every rank's RNG streams; rank 0 writes the
        single-process layout (plus `rng.pt` "ranks") and the others wait for it."""
        from retrain.backends.local import distributed

        weights = distributed.full_state(self.model, self.world, trainable_only=self.lora)
        optimizer = distributed.full_optimizer_state(self.model, self.optimizer, self.world)
        ranks = distributed.gather(self._rng_state(), self.world)
        if self.world.leader:
            write_checkpoint(path, model=self.model, lora=self.lora, optimizer=self.optimizer,
                             rng={**ranks[0], "ranks": ranks}, meta={**meta, "world_size": self.world.size},
                             weights=weights, optimizer_state=optimizer)
        distributed.gather(None, self.world)  # no rank reads the checkpoint before it is complete
        return str(Path(path))

    def load_checkpoint(self, path: str) -> None:
        if self.base_from_seed:
            import json

            saved = json.loads((Path(path) / "checkpoint.json").read_text()).get("seed")
            if saved != self.seed:
                raise RuntimeError(f"checkpoint {path} was trained on {self.model_name!r} initialised with "
                                   f"seed {saved}; this run uses seed {self.seed} (use the same [training] seed)")
        if self.world.distributed:
            rng = self._load_shared(path)
        else:
            rng, _ = read_checkpoint(path, model=self.model, lora=self.lora, optimizer=self.optimizer)
        torch.set_rng_state(rng["torch"])
        self.sample_generator.set_state(rng["sample"])
        self.select_generator.set_state(rng["select"])
        if "cuda" in rng and self.device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"], self.device)
        if self.server is not None:
            self.stale = True
            if not self.server.restore_from(Path(path)):
                self.checkpoint("resume")

    def _load_shared(self, path: str) -> dict[str, Any]:
        """Every rank reads the checkpoint (a filesystem all ranks see) and keeps its shards;
        its own RNG streams when the checkpoint was written by a world of this size."""
        from retrain.backends.local import distributed

        folder = Path(path)
        meta = json.loads((folder / "checkpoint.json").read_text())
        if bool(meta.get("lora")) != self.lora:
            kind = "a LoRA adapter" if meta.get("lora") else "full model weights"
            raise RuntimeError(f"checkpoint {folder} holds {kind}, which this run does not train")
        self._load_weights_shared(weights_folder(folder, lora=self.lora))
        distributed.load_optimizer_state(self.optimizer, torch.load(folder / "optimizer.pt", weights_only=True))
        rng = torch.load(folder / "rng.pt", weights_only=False)
        ranks = rng.get("ranks") or []
        return ranks[self.world.rank] if len(ranks) == self.world.size else rng

    def _load_weights_shared(self, folder: Path) -> None:
        from retrain.backends.local import distributed

        state = read_weights(folder, lora=self.lora)
        if self.lora:  # peft saves adapter keys without the adapter's name
            names = {n.replace(".default.", "."): n for n, p in self.model.named_parameters() if p.requires_grad}
            state = {names.get(k, k): v for k, v in state.items()}
        missing = distributed.load_full_state(self.model, state)
        expected = [n for n in missing if (not self.lora or "lora_" in n) and not n.endswith("lm_head.weight")]
        if expected:
            raise RuntimeError(f"checkpoint {folder} does not match the model (missing {sorted(expected)[:3]})")

    def load_adapter(self, path: str) -> None:
        """Trained weights alone (a `save_adapter` folder or a checkpoint's), for evaluation:
        the optimizer and the RNG streams are left as they are."""
        folder = weights_folder(Path(path), lora=self.lora)
        adapter = (folder / "adapter_model.safetensors").is_file()
        if adapter != self.lora or not any(folder.glob("*.safetensors")):
            kind = "a LoRA adapter" if self.lora else "full model weights (train_full_model = true)"
            raise UserError(f"{path} does not hold {kind}, which this config trains")
        if self.world.distributed:
            self._load_weights_shared(folder)
        else:
            load_weights(self.model, folder, lora=self.lora)

    def save_adapter(self, path: str) -> str:
        if not self.world.distributed:
            return str(write_dir_atomic(path, lambda tmp: save_weights(self.model, tmp, lora=self.lora)))
        from retrain.backends.local import distributed

        weights = distributed.full_state(self.model, self.world, trainable_only=self.lora)
        if self.world.leader:
            write_dir_atomic(path, lambda tmp: save_weights(self.model, tmp, lora=self.lora, state_dict=weights))
        distributed.gather(None, self.world)
        return str(Path(path))

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
            **self.offload.take(),
            **determinism.proof(),
            **kernel_metrics(reset=True),
        }

    def close(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        if self.server is not None:
            self.server.close()
        if self.world.distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


#: seeds of rank r's streams are the single-process seeds plus r times this
RANK_SEED_STRIDE = 1_000_003


def _refuse_distributed(config: TrainConfig, size: int) -> None:
    """What a multi-process run does not build yet, refused before the model loads."""
    t = config.training
    if config.inference.engine != "pytorch":
        raise UserError(f"[inference] engine = {config.inference.engine!r} with {size} training processes is "
                        "not built yet; use engine = \"pytorch\" or one process (docs/scaling.md)")
    if PolicyLossConfig(mode=t.policy_loss_mode).needs_selection:
        raise UserError(f"[training] policy_loss_mode = {t.policy_loss_mode!r} with {size} processes is not built "
                        "yet (its token selection spans the whole batch); use one process")
