"""What `explain` reports, as plain dicts (the JSON output; the text view renders them)."""

from __future__ import annotations

from typing import Any

import msgspec

from retrain.backends import catalog
from retrain.backends.objective import clip_band
from retrain.commands.machine import machine_warnings
from retrain.config.schema import SqueezeConfig, TrainConfig
from retrain.config.sft_loss import effective_sft_loss
from retrain.config.snapshot import sanitize
from retrain.io import layout
from retrain.training.resume import resume_contract
from retrain.validation.dependencies import dependency_warnings
from retrain.validation.load import LoadedConfig


def condition_of(config: TrainConfig) -> str:
    t = config.training
    if t.trainer == "sft":
        return "sft"
    if t.trainer == "optimizer_replay":
        return "optimizer_replay"
    a = config.algorithm
    label = a.algorithm_mode or f"{a.advantage_mode}+{a.transform_mode}"
    return label + ("+echo" if config.echo.enabled else "")


def data_description(config: TrainConfig) -> str:
    env = config.environment
    if env.provider:
        return f"{env.provider}:{env.id}"
    if config.training.trainer == "sft":
        return f"sft:{config.training.sft_data_path}"
    if config.training.trainer == "optimizer_replay":
        return f"optimizer_batch:{config.optimizer_batch.replay_path}"
    if config.data.source == "dataset":
        return f"dataset:{config.data.name or config.data.path}"
    return config.data.source


def _model_and_backend(c: TrainConfig) -> dict[str, Any]:
    entry = catalog.entry_for(c.backend.backend, c.backend.options)
    caps = entry.definition.capabilities if entry else catalog.PLUGIN_DEFAULT_CAPABILITIES
    resume_mode, resume_warning = resume_contract(caps)
    return {
        "model": c.model.model,
        "model_revision": c.model.revision,
        "model_local_files_only": c.model.local_files_only,
        "trainer": c.training.trainer,
        "backend": c.backend.backend,
        "backend_status": entry.status if entry else "unknown",
        "backend_options": sanitize(c.backend.options),
        "backend_capabilities": caps.as_dict(),
        "devices": c.backend.devices,
        "resume_mode": resume_mode,
        "resume_warning": resume_warning,
        "resume_from": c.resume.from_,
    }


def _algorithm(c: TrainConfig) -> dict[str, Any]:
    return {
        "condition": condition_of(c),
        "algorithm_mode": c.algorithm.algorithm_mode,
        "advantage_mode": c.algorithm.advantage_mode,
        "transform_mode": c.algorithm.transform_mode,
        "uncertainty_kind": c.algorithm.uncertainty_kind,
        "policy_loss_mode": c.training.policy_loss_mode,
        "importance_sampling_level": c.training.importance_sampling_level,
        # the band the loss clips the policy ratio to (cispo: its weight), None when it clips nothing
        "policy_ratio_clip": list(band) if (band := clip_band(c.training.policy_loss_mode, c.training.clip_eps,
                                                               c.training.clip_eps_high)) else None,
    }


def _steps_and_sft(c: TrainConfig) -> dict[str, Any]:
    t = c.training
    is_sft = t.trainer == "sft"
    datums = (t.sft_batch_size or t.batch_size) if is_sft else t.batch_size * t.group_size
    return {
        "max_steps": t.max_steps,
        "batch_size": t.batch_size,
        "group_size": t.group_size,
        "datums_per_step": datums,
        "total_datums": datums * t.max_steps,
        "sft_warmup_steps": t.sft_warmup_steps,
        "sft_data_path": t.sft_data_path,
        "sft_data_sha256": t.sft_data_sha256,
        "sft_data_rows": t.sft_data_rows,
        "sft_batch_size": t.sft_batch_size or t.batch_size,
        "sft_max_tokens": t.sft_max_tokens or (t.max_tokens if is_sft else t.max_tokens + 512),
        "sft_lr": t.sft_lr or t.lr,
        "sft_loss_fn": effective_sft_loss(c),
        "sft_batch_order": t.sft_batch_order,
    }


def _echo_and_sampling(c: TrainConfig) -> dict[str, Any]:
    t, e = c.training, c.echo
    echo_bounded = e.target_retention == "bounded"
    return {
        "echo_enabled": e.enabled,
        "echo_weight": e.weight,
        "echo_target_retention": e.target_retention,
        "echo_max_tokens_per_step": e.max_tokens_per_step if echo_bounded else None,
        "echo_max_token_ratio": e.max_token_ratio if echo_bounded else None,
        "max_tokens": t.max_tokens,
        "temperature": t.temperature,
        "top_p": t.top_p,
        "lr": t.lr,
        "seed": t.seed,
        "lora_rank": c.model.lora_rank,
        "lora_alpha": c.lora_alpha,
    }


def _data_and_outputs(c: TrainConfig) -> dict[str, Any]:
    return {
        "data": data_description(c),
        "reward_type": c.reward.type,
        "inference_engine": c.inference.engine,
        "log_dir": c.logging.log_dir,
        "adapter_path": c.backend.adapter_path,
        "save_every": c.training.save_every,
        "wandb_project": c.logging.wandb_project or "(disabled)",
        "trackers": ", ".join(c.logging.tracker_names()) or "(none)",
        "checkpoint_artifacts": c.logging.checkpoint_artifacts,
        "environment_provider": c.environment.provider,
        "environment_id": c.environment.id,
        "environment_max_turns": c.environment.max_turns,
        "environment_renderer": c.environment.args.get("renderer", ""),
    }


def single_summary(loaded: LoadedConfig) -> dict[str, Any]:
    # key order is the JSON output's and the text view's order
    c = loaded.config
    return {
        "mode": "single",
        "config": loaded.path or "(defaults)",
        **_model_and_backend(c),
        **_algorithm(c),
        **_steps_and_sft(c),
        **_echo_and_sampling(c),
        **_data_and_outputs(c),
        "warnings": [w.render() for w in loaded.warnings] + machine_warnings(c),
        "dep_warnings": dependency_warnings(c),
    }


def campaign_summary(loaded: LoadedConfig) -> dict[str, Any]:
    from retrain.campaign.expand import expand
    from retrain.campaign.parse import parse_campaign

    assert loaded.source is not None
    plan = parse_campaign(loaded.source, loaded)
    campaign = expand(plan, loaded.source)
    base = single_summary(loaded)
    return {
        "mode": "campaign",
        "config": loaded.path,
        "backend": base["backend"],
        "backend_capabilities": base["backend_capabilities"],
        "resume_mode": base["resume_mode"],
        "resume_warning": base["resume_warning"],
        "conditions": [c.label for c in plan.conditions],
        "seeds": list(plan.settings.seeds),
        "max_steps": plan.max_steps,
        "parallel": plan.settings.parallel,
        "executor": plan.settings.executor,
        "total_runs": plan.total_runs,
        "campaign_dir": str(campaign.dir),
        "resumes": (campaign.dir / layout.CAMPAIGN_MANIFEST).is_file(),
        "warnings": base["warnings"],
        "dep_warnings": base["dep_warnings"],
    }


def squeeze_summary(loaded: LoadedConfig) -> dict[str, Any]:
    from retrain.config.errors import ConfigError, ConfigIssue
    from retrain.validation.load import locate

    assert loaded.source is not None
    try:
        sq = msgspec.convert(loaded.source.data["squeeze"], SqueezeConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(locate([ConfigIssue(str(exc), key="[squeeze]")], loaded.source, loaded.overrides)) from None
    if not sq.adapter_path:
        raise ConfigError(locate([ConfigIssue("required for a squeeze config", key="[squeeze] adapter_path")],
                                 loaded.source, loaded.overrides))
    out: dict[str, Any] = {
        "mode": "squeeze",
        "config": loaded.path,
        "adapter_path": sq.adapter_path,
        "source_rank": sq.source_rank or loaded.config.model.lora_rank,
        "min_variance_retention": sq.min_variance_retention,
    }
    if sq.output_path:
        out["output_path"] = sq.output_path
    if sq.compress_to:
        out["compress_to"] = sq.compress_to
    return out
