"""The loop: `[training]` (sampling, the policy loss, DAPO, TL-GRPO, SFT), `[backpressure]` and
`[optimizer_batch]` (capture and replay of one optimizer step)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, get_args

import msgspec

from retrain.config.sections.base import F, Section

TrainerName = str
LossAggregation = Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant"]
LOSS_AGGREGATIONS: tuple[str, ...] = get_args(LossAggregation)
#: the built-in policy losses (retrain.backends.objectives); plugins add others by name
POLICY_LOSS_MODES: tuple[str, ...] = ("standard", "kl_cov", "clip_cov", "cispo", "sapo")
RatioLevel = Literal["token", "sequence"]
RATIO_LEVELS: tuple[str, ...] = get_args(RatioLevel)
#: the most batches the producer samples ahead (retrain.training.producer)
MAX_ASYNC_LEVEL = 16
AsyncVersions = Literal["pinned", "latest"]


class TrainingConfig(Section):
    trainer: Annotated[
        TrainerName,
        F("Runner: retrain (the RL loop), sft, optimizer_replay, command, ttt_discover, or a dotted path."),
    ] = "retrain"
    trainer_command: Annotated[
        str, F("Shell template for trainer = command ({config_path}, {log_dir}, {adapter_path}, {model}).")
    ] = ""
    seed: Annotated[int, F("Random seed; -1 = unseeded.", ge=-1, le=4294967295)] = -1
    max_steps: Annotated[int, F("RL steps to run.", gt=0)] = 500
    batch_size: Annotated[int, F("Prompts per step.", gt=0)] = 8
    group_size: Annotated[int, F("Completions sampled per prompt.", gt=0)] = 16
    max_tokens: Annotated[int, F("Maximum new tokens per completion.", gt=0)] = 10240
    temperature: Annotated[float, F("Sampling temperature (warning above 2).", ge=0)] = 0.7
    top_p: Annotated[float, F("Nucleus sampling mass.", gt=0, le=1)] = 0.95
    top_k: Annotated[int, F("Sample from the k most likely tokens only; 0 = all.", ge=0)] = 0
    min_p: Annotated[
        float, F("Drop tokens less likely than min_p times the most likely one; 0 = off.", ge=0, lt=1)
    ] = 0.0
    max_async_level: Annotated[
        int,
        F("0 = sample, then train; K > 0 = up to K batches are sampled ahead while the trainer trains, "
          "each from weights up to K updates old (docs/scaling.md).", ge=0, le=MAX_ASYNC_LEVEL),
    ] = 0
    async_versions: Annotated[
        AsyncVersions,
        F("Which published weights a batch sampled ahead uses: pinned = exactly max_async_level updates "
          "behind the step that trains it (reproducible; a resumed run matches the uninterrupted one), "
          "latest = the newest published when its sampling starts (never older than pinned; less stale "
          "when sampling is slower than training, not reproducible)."),
    ] = "pinned"
    max_off_policy_steps: Annotated[
        int,
        F("Drop the samples whose oldest token was drawn more than this many updates before the weights "
          "that train on it (async/dropped_samples counts them); 0 = max_async_level (none is dropped).", ge=0),
    ] = 0
    lr: Annotated[float, F("Learning rate.", gt=0)] = 4e-5
    weight_decay: Annotated[float, F("AdamW weight decay.")] = 0.0
    clip_eps: Annotated[float, F("Ratio clip epsilon, the band's lower side 1 - clip_eps; 0 = off (cispo: no lower "
                                 "bound).", ge=0)] = 0.0
    clip_eps_high: Annotated[float, F("Upper side of the ratio's clip band, 1 + clip_eps_high; 0 = same as clip_eps. "
                                      "Needs clip_eps > 0, except under cispo, whose weight it caps at 1 + "
                                      "clip_eps_high (both 0: a cap of 5). Not TRL's epsilon_high under cispo, "
                                      "which is the cap itself: TRL's epsilon_high = 5.0 is clip_eps_high = 4.0 "
                                      "here.", ge=0)] = 0.0
    clip_ratio_c: Annotated[float, F("Dual-clip lower bound for negative advantages; 0 = off.", ge=0)] = 0.0
    policy_loss_mode: Annotated[
        str,
        F("Policy loss: standard (PPO-clipped with clip_eps > 0), kl_cov, clip_cov, cispo (a clipped, "
          "stop-gradient ratio weighting -A log p; band [1 - clip_eps, 1 + clip_eps_high], by default no "
          "lower bound and a cap of 5), sapo (a soft sigmoid gate instead of a clip), an objective a package "
          "registers (entry-point group retrain.objectives), or a dotted path. Each backend lists those it "
          "computes (`retrain backends`)."),
    ] = "standard"
    importance_sampling_level: Annotated[
        RatioLevel,
        F("Level of the policy ratio: token, or sequence (GSPO: one ratio per completion, "
          "exp(mean over its tokens of log p - log p_old), clipped per completion; TRL's "
          "importance_sampling_level)."),
    ] = "token"
    sapo_temperature_pos: Annotated[
        float, F("sapo: gate temperature of tokens with a positive advantage (TRL's sapo_temperature_pos).", gt=0)
    ] = 1.0
    sapo_temperature_neg: Annotated[
        float, F("sapo: gate temperature of tokens with an advantage <= 0 (TRL's sapo_temperature_neg).", gt=0)
    ] = 1.05
    loss_aggregation: Annotated[
        LossAggregation,
        F("How per-token policy losses sum to the step's loss: token_mean (over every sampled token "
          "of the step; TRL dapo), seq_mean_token_mean (TRL grpo), seq_mean_token_sum, constant "
          "(divide by completions x max_tokens; Dr. GRPO). Non-default values need a backend that computes "
          "them (`retrain backends` lists each one's loss aggregations)."),
    ] = "token_mean"
    kl_coef: Annotated[
        float,
        F("Weight of the per-token KL penalty to the reference policy, the base model (LoRA: the "
          "adapter disabled; full fine-tuning: a frozen copy); 0 = off. TRL's beta, verl's kl_loss_coef.", ge=0),
    ] = 0.0
    kl_estimator: Annotated[
        Literal["k1", "k2", "k3"],
        F("KL estimator per sampled token, r = log(p_ref / p): k1 = -r, k2 = r^2 / 2, k3 = exp(r) - r - 1 "
          "(TRL's)."),
    ] = "k3"
    kl_cov_percent: Annotated[float, F("kl_cov: percent of tokens penalised.", ge=0, le=100)] = 0.2
    kl_cov_coef: Annotated[float, F("kl_cov: penalty coefficient.", ge=0)] = 1.0
    clip_cov_ratio: Annotated[float, F("clip_cov: fraction of tokens whose gradient is cut.", ge=0, le=1)] = 0.0002
    clip_cov_min: Annotated[float, F("clip_cov: lower covariance bound (must be < clip_cov_max).")] = 1.0
    clip_cov_max: Annotated[float, F("clip_cov: upper covariance bound.")] = 5.0
    adv_clip_max: Annotated[float, F("Cap token advantages to +/- this value; 0 = off.", ge=0)] = 0.0
    batch_advantage_norm: Annotated[
        bool, F("REINFORCE++ whole-batch normalisation of non-zero token advantages.")
    ] = False
    dynamic_sampling: Annotated[
        bool, F("DAPO dynamic sampling: drop groups whose rewards all tie (zero variance) and sample more "
                "prompts until batch_size groups train, in at most dynamic_sampling_max_rounds extra rounds.")
    ] = False
    dynamic_sampling_max_rounds: Annotated[
        int, F("Extra sampling rounds a step may take to fill its batch; a batch still short after them "
               "trains on the groups it has (dynamic/batch_fill < 1).", ge=1)
    ] = 4
    overlong_buffer: Annotated[
        int, F("DAPO soft overlong punishment: a completion longer than max_tokens - overlong_buffer tokens gets "
               "a penalty falling linearly to -overlong_penalty_factor at max_tokens, added to its reward; "
               "0 = off.", ge=0)
    ] = 0
    overlong_penalty_factor: Annotated[
        float, F("The overlong penalty at max_tokens (verl's overlong_buffer.penalty_factor).", gt=0)
    ] = 1.0
    mask_truncated_completions: Annotated[
        bool, F("Leave completions cut at max_tokens (finish_reason length) out of the policy loss (TRL's "
                "mask_truncated_completions); their rewards still count in their group's advantages.")
    ] = False
    max_examples: Annotated[int, F("Limit the data set to this many examples; 0 = all.", ge=0)] = 0
    save_every: Annotated[int, F("Checkpoint every N steps; 0 disables periodic checkpoints.", ge=0)] = 20
    tl_grpo: Annotated[bool, F("Turn-level GRPO with branching (multi-turn environments).")] = False
    tl_grpo_branch_mode: Annotated[str, F("TL-GRPO branching: action_space or llm.")] = "action_space"
    tl_grpo_branch_size: Annotated[int, F("TL-GRPO branches per turn (>= 2 when enabled).")] = 4
    tl_grpo_lookahead_steps: Annotated[int, F("TL-GRPO lookahead turns.", ge=0)] = 2
    tl_grpo_ema_decay: Annotated[float, F("TL-GRPO baseline EMA decay, in (0, 1) when enabled.")] = 0.9
    tl_grpo_ema_init: Annotated[float, F("TL-GRPO baseline EMA initial value.")] = 0.5
    sft_warmup_steps: Annotated[int, F("Supervised steps inside the RL trainer before RL.", ge=0)] = 0
    sft_data_path: Annotated[
        str, F("SFT data, one file: JSONL (messages, prompt/completion, or text rows), or a JSON, CSV, parquet or "
               "Arrow table of those columns (trainer = sft: mapped by [data]'s keys); required for trainer = sft.")
    ] = ""
    sft_data_sha256: Annotated[str, F("Optional sha256 pin of the SFT data (64 hex).")] = ""
    sft_data_rows: Annotated[int, F("Row-count pin of the SFT data; 0 = unpinned.", ge=0)] = 0
    sft_audit_path: Annotated[str, F("SFT audit file (set with sft_audit_sha256).")] = ""
    sft_audit_sha256: Annotated[str, F("sha256 of the SFT audit file (64 hex).")] = ""
    sft_token_audit_path: Annotated[str, F("SFT token audit file (set with sft_token_audit_sha256).")] = ""
    sft_token_audit_sha256: Annotated[str, F("sha256 of the SFT token audit file (64 hex).")] = ""
    sft_batch_size: Annotated[int, F("SFT batch size; 0 = batch_size.", ge=0)] = 0
    sft_max_tokens: Annotated[
        int, F("SFT sequence cap; 0 = max_tokens (standalone) or max_tokens + 512 (warmup).", ge=0)
    ] = 0
    sft_lr: Annotated[float, F("SFT learning rate; 0 = lr.", ge=0)] = 0.0
    sft_loss_fn: Annotated[
        Literal["auto", "importance_sampling", "cross_entropy"],
        F("SFT loss: auto (cross_entropy for trainer = sft, importance_sampling for warmup)."),
    ] = "auto"
    sft_batch_order: Annotated[
        Literal["shuffle", "length", "length_asc", "length_desc", "length_bucket"],
        F("SFT batch order."),
    ] = "shuffle"
    sft_length_bucket_size: Annotated[int, F("Window of length_bucket ordering; 0 = full traversal.", ge=0)] = 0
    sft_reshuffle_each_epoch: Annotated[bool, F("Derive each SFT epoch's order from (seed, epoch).")] = False


class BackpressureConfig(Section):
    _prefix: ClassVar[str] = "bp_"
    enabled: Annotated[bool, F("Adaptive batch size from a USL fit + roofline.")] = False
    warmup_steps: Annotated[int, F("Steps observed before acting.", ge=0)] = 10
    ema_decay: Annotated[float, F("EMA decay of throughput observations.", ge=0, lt=1)] = 0.9
    throttle_margin: Annotated[float, F("Utilisation above which the batch shrinks.", gt=0)] = 0.85
    increase_margin: Annotated[float, F("Utilisation below which the batch grows.", ge=0)] = 0.5
    min_batch_size: Annotated[int, F("Smallest batch size.", gt=0)] = 1
    max_batch_size: Annotated[int, F("Largest batch size.", gt=0)] = 64
    peak_gflops: Annotated[float, F("Device peak GFLOP/s for roofline hints; 0 = none.", ge=0)] = 0.0
    peak_bw_gb_s: Annotated[float, F("Device peak memory bandwidth GB/s; 0 = none.", ge=0)] = 0.0


class OptimizerBatchConfig(Section):
    _prefix: ClassVar[str] = "optimizer_batch_"
    capture: Annotated[bool, F("Capture the exact inputs of one optimizer step.")] = False
    replay_path: Annotated[str, F("Captured batch to replay (trainer = optimizer_replay).")] = ""
    expected_logical_sha256: Annotated[str, F("Pin of the captured logical batch (64 hex).")] = ""
    expected_manifest_sha256: Annotated[str, F("Pin of the capture manifest (64 hex).")] = ""
    allow_config_differences: Annotated[
        list[str], F("Config differences tolerated on replay (v1: backend.options.gradient_checkpointing).")
    ] = msgspec.field(default_factory=list)
