"""The schema covers the reference's fields, names and defaults."""

from __future__ import annotations

from retrain.config import TrainConfig
from retrain.config.fields import all_fields, by_flat, flat_dict

REFERENCE_FLAGS = """
--adapter-path --adv-clip-max --advantage-mode --algorithm-mode --attention-kernel --backend
--base-url --batch-advantage-norm --batch-size --bp-ema-decay --bp-enabled --bp-increase-margin
--bp-max-batch-size --bp-min-batch-size --bp-peak-bw-gb-s --bp-peak-gflops --bp-throttle-margin
--bp-warmup-steps --checkpoint-artifacts --clip-cov-max --clip-cov-min --clip-cov-ratio --clip-eps
--clip-eps-high --clip-ratio-c --data-source --devices --echo-enabled --echo-entropy-floor
--echo-loss-fn --echo-max-token-ratio --echo-max-tokens-per-step --echo-min-prompt-overlap
--echo-require-live-observation-bridge --echo-target-retention --echo-weight --environment-args
--environment-auto-install --environment-id --environment-max-turns --environment-provider
--environment-rollout-buffer-size --environment-rollout-env-workers
--generation-log-samples-per-prompt --generation-top-surprisal-limit --grad-clip-norm --group-size
--gtpo-beta --hicra-alpha --inference-dtype --inference-engine --inference-url --kl-cov-coef
--kl-cov-percent --kv-cache-dtype --log-dir --log-generations --lora-alpha --lora-dropout
--lora-rank --lr --max-examples --max-steps --max-tokens --model --model-local-files-only
--model-revision --optim-beta1 --optim-beta2 --optim-eps --optimizer-batch-allow-config-differences
--optimizer-batch-capture --optimizer-batch-expected-logical-sha256
--optimizer-batch-expected-manifest-sha256 --optimizer-batch-replay-path --planning-detector
--planning-model --planning-threshold --plugins-search-paths --plugins-strict --policy-loss-mode
--prefix-caching --resume-from --reward-custom-function --reward-custom-module --reward-judge-model
--reward-type --save-every --seed --sepa-correct-rate-gate --sepa-delay-steps --sepa-schedule
--sepa-steps --sft-audit-path --sft-audit-sha256 --sft-batch-order --sft-batch-size --sft-data-path
--sft-data-rows --sft-data-sha256 --sft-length-bucket-size --sft-loss-fn --sft-lr --sft-max-tokens
--sft-reshuffle-each-epoch --sft-token-audit-path --sft-token-audit-sha256 --sft-warmup-steps
--strategic-grams --surprisal-mask-rho --temperature --tinker-max-concurrent --tinker-throttle-dir
--tl-grpo --tl-grpo-branch-mode --tl-grpo-branch-size --tl-grpo-ema-decay --tl-grpo-ema-init
--tl-grpo-lookahead-steps --top-p --trainer --trainer-command --transform-mode --uncertainty-kind
--wandb-entity --wandb-group --wandb-project --wandb-run-name --wandb-tags --weight-decay
""".split()

MAPPING_FIELDS = {"backend_options", "algorithm_params", "advantage_params", "transform_params"}


#: Keys retrain adds beyond the reference (documented in docs/decisions.md).
ADDED_FIELDS = {"data_path", "data_difficulty", "data_name", "data_subset", "data_split", "data_eval_split",
                "data_prompt_key", "data_answer_key", "data_messages_key", "data_prompt_template",
                "data_system_prompt", "data_answer_pattern", "data_chat_template_kwargs", "data_max_prompt_tokens",
                "reward_timeout_s", "reward_max_error_share", "reward_max_error_steps", "top_k", "min_p", "max_async_level",
                "async_versions", "max_off_policy_steps", "recompute_stale_logprobs", "partial_rollout_tokens", "routing_replay",
                "inference_concurrency", "inference_timeout_s", "inference_retries",
                "importance_sampling_correction", "importance_sampling_cap", "eval_every", "eval_before_train",
                "eval_at_end", "eval_k", "eval_n", "eval_temperature", "eval_top_p", "eval_max_tokens", "eval_max_examples",
                "eval_pass_threshold", "eval_data_path", "loss_aggregation", "kl_coef", "kl_estimator",
                "environment_max_episode_tokens", "importance_sampling_level", "sapo_temperature_pos",
                "sapo_temperature_neg", "importance_sampling_mode", "dynamic_sampling",
                "dynamic_sampling_max_rounds", "overlong_buffer", "overlong_penalty_factor",
                "mask_truncated_completions", "reward_judge_base_url", "reward_judge_api_key_env",
                "reward_judge_client", "reward_judge_concurrency", "reward_judge_retries", "trackers",
                "tracker_project",
                # a reward model ([reward] type = "model") and on-policy distillation ([teacher])
                "reward_model", "reward_model_url", "reward_model_api_key_env", "reward_model_batch_size",
                "reward_model_template", "reward_model_score", "reward_model_label", "reward_model_device",
                "teacher_model", "teacher_adapter", "teacher_url", "teacher_api_key_env", "teacher_kl_coef",
                "teacher_reward_coef", "teacher_dtype", "teacher_device", "teacher_batch_size", "teacher_timeout_s",
                "teacher_retries", "teacher_concurrency"}


def test_every_reference_field_plus_documented_additions() -> None:
    flags = {f.flag for f in all_fields() if f.flat not in MAPPING_FIELDS}
    added = {"--" + f.replace("_", "-") for f in ADDED_FIELDS}
    assert flags == set(REFERENCE_FLAGS) | added
    assert len(all_fields()) == 134 + len(ADDED_FIELDS)
    assert {f.flat for f in all_fields()} >= MAPPING_FIELDS


def test_reference_defaults() -> None:
    d = flat_dict(TrainConfig())
    expected = {
        "advantage_mode": "maxrl", "transform_mode": "gtpo_sepa", "uncertainty_kind": "surprisal",
        "backend": "local", "devices": "gpu:0",
        "model": "Qwen/Qwen3-4B-Instruct-2507", "lora_rank": 32, "lora_alpha": 0,
        "optim_beta1": 0.9, "optim_beta2": 0.95, "optim_eps": 1e-8, "grad_clip_norm": 0.0,
        "gtpo_beta": 0.1, "hicra_alpha": 0.2, "planning_detector": "regex",
        "planning_threshold": 0.02, "data_source": "math", "reward_type": "match",
        "reward_custom_function": "score", "seed": -1, "max_steps": 500, "batch_size": 8,
        "group_size": 16, "max_tokens": 10240, "temperature": 0.7, "top_p": 0.95, "lr": 4e-5,
        "clip_cov_ratio": 0.0002, "clip_cov_min": 1.0, "clip_cov_max": 5.0, "save_every": 20,
        "tl_grpo_branch_size": 4, "sepa_steps": 500, "sepa_delay_steps": 50,
        "sepa_correct_rate_gate": 0.1, "inference_engine": "pytorch", "prefix_caching": True,
        "bp_warmup_steps": 10, "bp_max_batch_size": 64, "environment_max_turns": -1,
        "log_dir": "logs/train", "checkpoint_artifacts": "auto", "log_generations": True,
        "generation_log_samples_per_prompt": 1, "plugins_search_paths": ["plugins"],
        "plugins_strict": True, "echo_weight": 0.05, "echo_max_tokens_per_step": 2048,
        "tinker_max_concurrent": 4, "kl_cov_percent": 0.2, "sft_loss_fn": "auto",
    }
    for key, value in expected.items():
        assert d[key] == value, key
    # the reference's "/tmp/retrain_adapter" was one folder for every run: unset, a run saves
    # under <log_dir>/adapters (retrain.config.folders, docs/reliability.md)
    assert d["adapter_path"] == ""


def test_flat_names_for_irregular_keys() -> None:
    irregular = {
        "resume_from": ("resume", "from"), "optim_beta1": ("optimizer", "beta1"),
        "grad_clip_norm": ("optimizer", "grad_clip_norm"), "bp_enabled": ("backpressure", "enabled"),
        "inference_engine": ("inference", "engine"), "kv_cache_dtype": ("inference", "kv_cache_dtype"),
        "tinker_max_concurrent": ("backend", "max_concurrent"), "model_revision": ("model", "revision"),
        "backend_options": ("backend", "options"), "algorithm_params": ("algorithm", "params"),
        "environment_args": ("environment", "args"), "strategic_grams": ("logging", "strategic_grams"),
    }
    for flat, (section, key) in irregular.items():
        spec = by_flat()[flat]
        assert (spec.section, spec.key) == (section, key)


def test_effective_lora_alpha() -> None:
    c = TrainConfig()
    assert c.lora_alpha == 64
