"""The TOML schema: one msgspec Struct per TOML section, and `TrainConfig` holding them.

Field names are the TOML keys. Each field's `Meta` carries its meaning (`description`), its
bounds (`ge`/`gt`/`le`/`lt`, checked by `retrain.config.load`) and, under `extra["flag"]`, the
reference implementation's flat field name when it differs from `<prefix><key>`. The flat name
is what CLI flags (`--optim-beta1`), campaign condition overrides and config snapshots use, so
users' commands and files written for the reference keep working.

docs/configuration.md is generated from this module (`retrain.config.reference`).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, get_args

import msgspec
from msgspec import Meta


def F(
    description: str,
    *,
    flag: str | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Meta:
    """Field metadata: meaning, bounds, and the reference's flat name when it is irregular."""
    extra = {"flag": flag} if flag else None
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    meta: Meta = Meta(description=description, extra=extra, **bounds)  # type: ignore[call-overload]
    return meta


JsonTable = dict[str, Any]


class Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A TOML section. `_prefix` + key gives the flat (reference) field name."""

    _prefix: ClassVar[str] = ""


class AlgorithmConfig(Section):
    algorithm_mode: Annotated[
        str,
        F(
            "Full-pipeline selector; when set it replaces advantage_mode + transform_mode. "
            "Built-ins: grpo_none, maxrl_none, maxrl_gtpo, maxrl_gtpo_hicra, maxrl_gtpo_sepa, "
            "reinforce_pp_none, reinforce_pp_gtpo, reinforce_pp_gtpo_sepa, reinforce_pp_delight, "
            "reinforce_pp_delight_sepa, discover_entropic, ttt_discover_entropic; or a dotted path."
        ),
    ] = ""
    advantage_mode: Annotated[
        str, F("Episode-level advantage: grpo, maxrl, reinforce_pp, or a dotted plugin path.")
    ] = "maxrl"
    transform_mode: Annotated[
        str,
        F(
            "Token-credit transform: none, gtpo, entropy_mask, gtpo_hicra, gtpo_sepa, "
            "gtpo_sepa_amp, gtpo_sepa_amp_c, delight, delight_sepa, hard_delight, or a dotted path."
        ),
    ] = "gtpo_sepa"
    uncertainty_kind: Annotated[
        str,
        F(
            "Per-token uncertainty for GTPO-family transforms: surprisal, predictive_variance, "
            "shannon_entropy (aliases accepted, case-insensitive), or a dotted path."
        ),
    ] = "surprisal"
    surprisal_mask_rho: Annotated[
        float,
        F("Top-rho keep fraction of the entropy_mask transform (alias key: entropy_mask_rho).", ge=0, le=1),
    ] = 0.0
    params: Annotated[
        JsonTable, F("Free-form parameters for an algorithm_mode plugin.", flag="algorithm_params")
    ] = msgspec.field(default_factory=dict)
    advantage_params: Annotated[
        JsonTable, F("Free-form parameters passed to the advantage mode.")
    ] = msgspec.field(default_factory=dict)
    transform_params: Annotated[
        JsonTable,
        F("Free-form parameters passed to the transform (Delight knobs, SEPA amp, uncertainty_kind)."),
    ] = msgspec.field(default_factory=dict)


class BackendConfig(Section):
    backend: Annotated[
        str,
        F("Training backend: local, unsloth, tinker, prime_rl, a registered entry point, or a dotted path."),
    ] = "local"
    devices: Annotated[
        str,
        F("Comma-separated devices: gpu:N or cpu. N entries train one policy on N processes, one per entry "
          "(torchrun, FSDP2; docs/scaling.md)."),
    ] = "gpu:0"
    adapter_path: Annotated[
        str, F("Where adapters are saved: <adapter_path>/checkpoint_step_N and <adapter_path>/final.")
    ] = "/tmp/retrain_adapter"
    throttle_dir: Annotated[
        str,
        F("Cross-process Tinker semaphore directory (parallel campaigns set it).", flag="tinker_throttle_dir"),
    ] = ""
    max_concurrent: Annotated[
        int, F("Maximum simultaneous Tinker calls when throttling.", flag="tinker_max_concurrent", gt=0)
    ] = 4
    options: Annotated[
        JsonTable,
        F(
            "Backend-specific options, schema-checked for built-in backends (see `retrain backends`).",
            flag="backend_options",
        ),
    ] = msgspec.field(default_factory=dict)


class ModelConfig(Section):
    model: Annotated[
        str, F("Hugging Face model id, a local path, or the built-in offline model `tiny`.")
    ] = "Qwen/Qwen3-4B-Instruct-2507"
    revision: Annotated[
        str, F("Exact model revision for tokenizer and local loads.", flag="model_revision")
    ] = ""
    local_files_only: Annotated[
        bool, F("Never contact the hub; requires `revision`.", flag="model_local_files_only")
    ] = False
    base_url: Annotated[str, F("Tinker service URL, or the fallback inference URL.")] = ""
    lora_rank: Annotated[int, F("LoRA rank (also the squeeze source rank fallback).", gt=0)] = 32


class LoraConfig(Section):
    _prefix: ClassVar[str] = "lora_"
    alpha: Annotated[int, F("LoRA alpha; 0 means 2 x lora_rank.", ge=0)] = 0
    dropout: Annotated[float, F("LoRA dropout probability.", ge=0, lt=1)] = 0.0


class OptimizerConfig(Section):
    _prefix: ClassVar[str] = "optim_"
    beta1: Annotated[float, F("AdamW beta1.", ge=0, lt=1)] = 0.9
    beta2: Annotated[float, F("AdamW beta2.", ge=0, lt=1)] = 0.95
    eps: Annotated[float, F("AdamW epsilon.", gt=0)] = 1e-8
    grad_clip_norm: Annotated[
        float, F("Global gradient-norm clip; 0 disables.", flag="grad_clip_norm", ge=0)
    ] = 0.0


class GtpoConfig(Section):
    _prefix: ClassVar[str] = "gtpo_"
    beta: Annotated[float, F("GTPO uncertainty-weighting strength; 0 disables the weighting.", ge=0)] = 0.1


class HicraConfig(Section):
    _prefix: ClassVar[str] = "hicra_"
    alpha: Annotated[
        float, F("HICRA planning-token amplification, in [0, 1] (above 1 it flips negative credit); 0 disables HICRA.", ge=0, le=1)
    ] = 0.2


class PlanningConfig(Section):
    _prefix: ClassVar[str] = "planning_"
    detector: Annotated[str, F("Planning-token detector: regex, semantic, or a dotted path.")] = "regex"
    model: Annotated[str, F("Sentence-embedding model of the semantic detector.")] = "all-MiniLM-L6-v2"
    threshold: Annotated[float, F("Similarity threshold of the semantic detector.", ge=0)] = 0.02


class DataConfig(Section):
    _prefix: ClassVar[str] = "data_"
    source: Annotated[
        str,
        F(
            "Prompt source: math (MATH, local path or hub), arithmetic (generated, offline), "
            "an entry point, or a dotted path. Ignored when [environment] provider is set."
        ),
    ] = "math"
    path: Annotated[
        str, F("Local copy of the data (JSONL with problem/solution or prompt/reference rows); "
               "for math, used instead of the hub.")
    ] = ""
    difficulty: Annotated[
        int, F("arithmetic: digits per operand (1 = single-digit addition, 100 problems).", ge=1, le=6)
    ] = 1


class RewardConfig(Section):
    _prefix: ClassVar[str] = "reward_"
    type: Annotated[str, F("Reward: match, strict, partial, math, judge, custom, or a dotted path.")] = "match"
    judge_model: Annotated[str, F("Judge model for type = judge (default gpt-4o-mini).")] = ""
    custom_module: Annotated[str, F("Module of the custom reward (type = custom).")] = ""
    custom_function: Annotated[str, F("Function of the custom reward: fn(response, reference).")] = "score"
    timeout_s: Annotated[
        float, F("Per-item reward deadline in seconds; a reward that overruns (or raises) scores 0 and is counted.", gt=0)
    ] = 10.0
    max_error_share: Annotated[
        float, F("Stop the run when at least this share of a step's completions fail to score (the reward raises, "
                 "overruns or returns no number) for max_error_steps steps in a row.", gt=0, le=1)
    ] = 1.0
    max_error_steps: Annotated[
        int, F("Steps in a row at max_error_share that stop the run (a checkpoint is saved, exit status 3); "
               "0 = never stop.", ge=0)
    ] = 3


class ResumeConfig(Section):
    _prefix: ClassVar[str] = "resume_"
    from_: Annotated[
        str, F("Log directory holding trainer_state.json to resume from.", flag="resume_from")
    ] = msgspec.field(default="", name="from")


TrainerName = str
LossAggregation = Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant"]
LOSS_AGGREGATIONS: tuple[str, ...] = get_args(LossAggregation)
PolicyLossMode = Literal["standard", "kl_cov", "clip_cov", "cispo", "sapo"]
POLICY_LOSS_MODES: tuple[str, ...] = get_args(PolicyLossMode)
RatioLevel = Literal["token", "sequence"]
RATIO_LEVELS: tuple[str, ...] = get_args(RatioLevel)


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
        F("0 = sample, then train; 1 = sample step k+1 on the inference server while step k trains "
          "(one step off-policy; needs an inference server engine or backend = tinker).", ge=0, le=1),
    ] = 0
    lr: Annotated[float, F("Learning rate.", gt=0)] = 4e-5
    weight_decay: Annotated[float, F("AdamW weight decay.")] = 0.0
    clip_eps: Annotated[float, F("Ratio clip epsilon, the band's lower side 1 - clip_eps; 0 = off (cispo: no lower "
                                 "bound).", ge=0)] = 0.0
    clip_eps_high: Annotated[float, F("Asymmetric upper clip 1 + clip_eps_high; needs clip_eps > 0 (but under cispo). "
                                      "0 = same as clip_eps.", ge=0)] = 0.0
    clip_ratio_c: Annotated[float, F("Dual-clip lower bound for negative advantages; 0 = off.", ge=0)] = 0.0
    policy_loss_mode: Annotated[
        PolicyLossMode,
        F("Policy loss: standard (PPO-clipped with clip_eps > 0), kl_cov, clip_cov, cispo (a clipped, "
          "stop-gradient ratio weighting -A log p; bounds clip_eps / clip_eps_high), sapo (a soft sigmoid "
          "gate instead of a clip). Each backend lists those it computes (`retrain backends`)."),
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
          "(divide by completions x max_tokens; Dr. GRPO). Non-default values need backend = local or tinker."),
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
        str, F("SFT JSONL (messages, prompt/completion, or text rows); required for trainer = sft.")
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


class EvalConfig(Section):
    _prefix: ClassVar[str] = "eval_"
    every: Annotated[
        int, F("Evaluate on held-out problems after every N RL steps; 0 = no periodic evaluation.", ge=0)
    ] = 0
    before_train: Annotated[
        bool, F("Evaluate the starting policy (after any SFT warmup) before the first RL step, as step 0.")
    ] = False
    at_end: Annotated[
        bool | None,
        F("Evaluate the final policy after the last step; unset = true when every > 0. "
          "Set alone it is the only evaluation."),
    ] = None
    k: Annotated[int, F("The k of pass@k and maj@k.", ge=1)] = 1
    n: Annotated[
        int, F("Samples drawn per problem, at least k; pass@1 and pass@k are estimated from them without "
               "bias. 0 = k.", ge=0)
    ] = 0
    temperature: Annotated[
        float, F("Sampling temperature; -1 = 0 (greedy) when one sample per problem is drawn, else "
                 "[training] temperature.", ge=-1)
    ] = -1.0
    top_p: Annotated[float, F("Nucleus sampling mass; 0 = [training] top_p.", ge=0, le=1)] = 0.0
    max_tokens: Annotated[int, F("Maximum new tokens per completion; 0 = [training] max_tokens.", ge=0)] = 0
    max_examples: Annotated[int, F("Evaluate at most this many problems (the first ones); 0 = all.", ge=0)] = 0
    pass_threshold: Annotated[float, F("A sample passes when its reward is at least this.")] = 1.0
    data_path: Annotated[
        str,
        F("JSONL of prompt/reference rows to evaluate on; empty = the held-out split of the "
          "[data] source (arithmetic and math have one)."),
    ] = ""


class EchoConfig(Section):
    _prefix: ClassVar[str] = "echo_"
    enabled: Annotated[bool, F("Auxiliary supervised loss on environment tokens (ECHO).")] = False
    weight: Annotated[float, F("ECHO loss weight.", ge=0, le=1)] = 0.05
    loss_fn: Annotated[Literal["cross_entropy"], F("ECHO loss function.")] = "cross_entropy"
    target_retention: Annotated[
        Literal["bounded", "all"], F("bounded (caps apply) or all (needs entropy_floor = 0).")
    ] = "bounded"
    max_tokens_per_step: Annotated[int, F("ECHO token cap per step.", gt=0)] = 2048
    max_token_ratio: Annotated[float, F("ECHO tokens per RL token cap.", gt=0)] = 0.5
    entropy_floor: Annotated[float, F("Skip ECHO targets below this entropy.", ge=0)] = 0.01
    min_prompt_overlap: Annotated[float, F("Minimum prompt overlap for ECHO rows.", ge=0, le=1)] = 0.5
    require_live_observation_bridge: Annotated[
        bool, F("Fail when the exact observation-token bridge is unavailable (needs enabled).")
    ] = False


class SepaConfig(Section):
    _prefix: ClassVar[str] = "sepa_"
    steps: Annotated[int, F("SEPA linear ramp length in steps.", ge=0)] = 500
    schedule: Annotated[Literal["linear", "auto"], F("SEPA schedule: linear or auto.")] = "linear"
    delay_steps: Annotated[int, F("Steps before the SEPA ramp starts.", ge=0)] = 50
    correct_rate_gate: Annotated[
        float, F("SEPA stays off until the running correct rate reaches this (sticky).", ge=0, le=1)
    ] = 0.1


class InferenceConfig(Section):
    engine: Annotated[
        str,
        F("Sampling engine: pytorch, vllm, sglang, openai, max, trtllm, mlx.", flag="inference_engine"),
    ] = "pytorch"
    url: Annotated[
        str,
        F("Inference server URL (OpenAI-compatible engines); empty = the engine's usual local port "
          "(vllm and openai 8000, sglang 30000).", flag="inference_url"),
    ] = ""
    concurrency: Annotated[
        int, F("Requests in flight to the inference server at once.", flag="inference_concurrency", gt=0)
    ] = 64
    timeout_s: Annotated[
        float, F("Read timeout of one inference request, in seconds.", flag="inference_timeout_s", gt=0)
    ] = 300.0
    retries: Annotated[
        int,
        F("Retries of a failed inference request (connection error, 429, 5xx), with backoff.",
          flag="inference_retries", ge=0),
    ] = 5
    importance_sampling_correction: Annotated[
        bool,
        F("Weight each token's loss by the ratio of the trainer's to the sampler's probability, truncated or "
          "masked at importance_sampling_cap (importance_sampling_mode): importance sampling against the "
          "sampler mismatch (TRL's vllm_importance_sampling_correction)."),
    ] = False
    importance_sampling_cap: Annotated[
        float, F("Cap of the importance-sampling ratio: truncate modes clip the weight to it, mask modes "
                 "drop what exceeds it.", gt=0)
    ] = 2.0
    importance_sampling_mode: Annotated[
        Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"],
        F("The correction's level and treatment of a ratio above the cap (TRL's "
          "vllm_importance_sampling_mode): token_* weigh each token by its own ratio, sequence_* each "
          "completion's tokens by the product of their ratios; *_truncate clips the weight at the cap, "
          "*_mask drops the token or completion from the loss."),
    ] = "token_truncate"
    attention_kernel: Annotated[
        Literal["default", "flash", "triton", "tk", "cutlass"], F("Attention kernel hint.")
    ] = "default"
    dtype: Annotated[
        Literal["auto", "bf16", "fp8", "fp4"], F("Inference weight dtype.", flag="inference_dtype")
    ] = "auto"
    kv_cache_dtype: Annotated[Literal["auto", "bf16", "fp8", "int8"], F("KV-cache dtype.")] = "auto"
    prefix_caching: Annotated[bool, F("Reuse the KV cache of shared prompt prefixes.")] = True


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


class EnvironmentConfig(Section):
    _prefix: ClassVar[str] = "environment_"
    provider: Annotated[str, F("Environment provider: '' (none), verifiers, openenv, or an entry point.")] = ""
    id: Annotated[str, F("Environment id (verifiers) or URL (openenv: http(s):// or ws(s)://).")] = ""
    args: Annotated[
        JsonTable, F("Environment arguments: a table, or a JSON object string.")
    ] = msgspec.field(default_factory=dict)
    max_turns: Annotated[int, F("Override the environment's max turns; -1 = no override.", ge=-1)] = -1
    max_episode_tokens: Annotated[
        int, F("verifiers multi-turn: an episode stops after the turn that brings its tokens (prompts and "
               "replies) to this many; 0 = no limit.", ge=0)
    ] = 0
    auto_install: Annotated[bool, F("Install a missing verifiers environment package.")] = False
    rollout_env_workers: Annotated[int, F("Concurrent environment workers.", ge=1)] = 1
    rollout_buffer_size: Annotated[int, F("Rollout buffer; 0 = group size.", ge=0)] = 0


class LoggingConfig(Section):
    log_dir: Annotated[str, F("Run output directory.")] = "logs/train"
    wandb_project: Annotated[str, F("W&B project; non-empty enables W&B.")] = ""
    wandb_run_name: Annotated[str, F("W&B run name; default basename(log_dir).")] = ""
    wandb_entity: Annotated[str, F("W&B entity.")] = ""
    wandb_group: Annotated[str, F("W&B group.")] = ""
    wandb_tags: Annotated[str, F("W&B tags, comma-separated.")] = ""
    checkpoint_artifacts: Annotated[
        Literal["auto", "off", "wandb"],
        F("Checkpoint upload: auto (to W&B when it is on; until that is built, checkpoints stay "
          "under adapter_path and a warning says so), off, wandb (fail-closed)."),
    ] = "auto"
    log_generations: Annotated[bool, F("Write emergence/generations.jsonl.")] = True
    generation_log_samples_per_prompt: Annotated[
        int, F("Completions logged per prompt (highest reward first); 0 = all.", ge=0)
    ] = 1
    generation_top_surprisal_limit: Annotated[
        int, F("Add the N most surprising tokens to each logged generation.", ge=0)
    ] = 0
    strategic_grams: Annotated[
        str | list[str], F("Planning grams: a list, a JSON array string, or CSV; empty = built-in list.")
    ] = ""


class OptimizerBatchConfig(Section):
    _prefix: ClassVar[str] = "optimizer_batch_"
    capture: Annotated[bool, F("Capture the exact inputs of one optimizer step.")] = False
    replay_path: Annotated[str, F("Captured batch to replay (trainer = optimizer_replay).")] = ""
    expected_logical_sha256: Annotated[str, F("Pin of the captured logical batch (64 hex).")] = ""
    expected_manifest_sha256: Annotated[str, F("Pin of the capture manifest (64 hex).")] = ""
    allow_config_differences: Annotated[
        list[str], F("Config differences tolerated on replay (v1: backend.options.gradient_checkpointing).")
    ] = msgspec.field(default_factory=list)


class PluginsConfig(Section):
    _prefix: ClassVar[str] = "plugins_"
    search_paths: Annotated[
        list[str], F("Module prefixes tried before a plain dotted import (a list or comma string).")
    ] = msgspec.field(default_factory=lambda: ["plugins"])
    strict: Annotated[bool, F("Fail fast on plugin load or shape errors.")] = True


class TrainConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A single run's configuration: one attribute per TOML section."""

    algorithm: AlgorithmConfig = msgspec.field(default_factory=AlgorithmConfig)
    backend: BackendConfig = msgspec.field(default_factory=BackendConfig)
    model: ModelConfig = msgspec.field(default_factory=ModelConfig)
    lora: LoraConfig = msgspec.field(default_factory=LoraConfig)
    optimizer: OptimizerConfig = msgspec.field(default_factory=OptimizerConfig)
    gtpo: GtpoConfig = msgspec.field(default_factory=GtpoConfig)
    hicra: HicraConfig = msgspec.field(default_factory=HicraConfig)
    planning: PlanningConfig = msgspec.field(default_factory=PlanningConfig)
    data: DataConfig = msgspec.field(default_factory=DataConfig)
    reward: RewardConfig = msgspec.field(default_factory=RewardConfig)
    resume: ResumeConfig = msgspec.field(default_factory=ResumeConfig)
    training: TrainingConfig = msgspec.field(default_factory=TrainingConfig)
    eval: EvalConfig = msgspec.field(default_factory=EvalConfig)
    echo: EchoConfig = msgspec.field(default_factory=EchoConfig)
    sepa: SepaConfig = msgspec.field(default_factory=SepaConfig)
    inference: InferenceConfig = msgspec.field(default_factory=InferenceConfig)
    backpressure: BackpressureConfig = msgspec.field(default_factory=BackpressureConfig)
    environment: EnvironmentConfig = msgspec.field(default_factory=EnvironmentConfig)
    logging: LoggingConfig = msgspec.field(default_factory=LoggingConfig)
    optimizer_batch: OptimizerBatchConfig = msgspec.field(default_factory=OptimizerBatchConfig)
    plugins: PluginsConfig = msgspec.field(default_factory=PluginsConfig)

    @property
    def lora_alpha(self) -> int:
        """Effective LoRA alpha (0 in the file means 2 x rank)."""
        return self.lora.alpha or 2 * self.model.lora_rank

    @property
    def is_rl(self) -> bool:
        return self.training.trainer == "retrain"


class CampaignCondition(msgspec.Struct, kw_only=True):
    advantage_mode: str
    transform_mode: str
    overrides: dict[str, Any] = msgspec.field(default_factory=dict)


class CampaignConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """`[campaign]`: conditions x seeds over the file's base sections."""

    seeds: Annotated[list[int], F("Seeds each condition runs with.")] = msgspec.field(
        default_factory=lambda: [42, 101, 202, 303, 404, 505, 606, 707]
    )
    max_steps: Annotated[
        int, F("Steps per run; 0 = the base [training] max_steps.", ge=0)
    ] = 0
    parallel: Annotated[bool, F("Run as parallel subprocesses.")] = False
    max_workers: Annotated[int, F("Parallel workers; 0 = all runs at once.", ge=0)] = 0
    stagger_seconds: Annotated[float, F("Pause between parallel launches.", ge=0)] = 0.0
    summary_script: Annotated[str, F("Script run after the campaign (relative to the file).")] = ""
    summary_args: Annotated[list[str], F("Arguments of the summary script.")] = msgspec.field(
        default_factory=list
    )
    conditions: Annotated[
        list[dict[str, Any]],
        F("[[campaign.conditions]]: advantage_mode, transform_mode and any field overrides."),
    ] = msgspec.field(default_factory=list)
    executor: Annotated[
        Literal["local", "ray"],
        F("Where runs execute: local (in-process, or worker processes with parallel) or ray "
          "(one Ray task per run; needs the retrain-cli[ray] extra)."),
    ] = "local"
    ray_address: Annotated[
        str, F("Ray cluster to join (\"auto\", \"ray://host:10001\"); empty = start a local Ray instance.")
    ] = ""
    num_cpus: Annotated[float, F("Ray: CPUs each run reserves.", ge=0)] = 1.0
    num_gpus: Annotated[float, F("Ray: GPUs each run reserves.", ge=0)] = 0.0
    max_retries: Annotated[
        int, F("Ray: times a run whose worker or node died is restarted from its last checkpoint.", ge=0)
    ] = 2


class SqueezeConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """`[squeeze]`: LoRA-Squeeze rank analysis and compression of a trained adapter."""

    adapter_path: Annotated[str, F("Adapter to analyse (required for a standalone squeeze).")] = ""
    source_rank: Annotated[int, F("Rank of the adapter; 0 = [model] lora_rank.", ge=0)] = 0
    target_ranks: Annotated[list[int], F("Ranks to evaluate; empty = powers of two.")] = msgspec.field(
        default_factory=list
    )
    min_variance_retention: Annotated[
        float, F("Smallest mean variance retained by the recommended rank.", gt=0, le=1)
    ] = 0.95
    output_path: Annotated[str, F("Write the compressed adapter here; empty = analyse only.")] = ""
    compress_to: Annotated[int, F("Target rank; 0 = the recommended rank.", ge=0)] = 0
    device: Annotated[str, F("Device for the SVD.")] = "cpu"


def _sections() -> dict[str, type[Section]]:
    info = msgspec.inspect.type_info(TrainConfig)
    assert isinstance(info, msgspec.inspect.StructType)
    out: dict[str, type[Section]] = {}
    for f in info.fields:
        assert isinstance(f.type, msgspec.inspect.StructType) and issubclass(f.type.cls, Section)
        out[f.encode_name] = f.type.cls
    return out


#: TOML section name -> its Struct, in schema order.
SECTIONS: dict[str, type[Section]] = _sections()

#: Older key names still accepted in a file: (section, old key) -> new key.
KEY_ALIASES: dict[tuple[str, str], str] = {("algorithm", "entropy_mask_rho"): "surprisal_mask_rho"}

#: Top-level tables that select another config kind rather than a TrainConfig section.
KIND_TABLES = ("campaign", "squeeze")
