"""What trains and samples: `[backend]`, `[model]`, `[lora]`, `[optimizer]` and `[inference]`."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import msgspec

from retrain.config.sections.base import F, JsonTable, Section


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
        str,
        F("Where adapters are saved: <adapter_path>/checkpoint_step_N and <adapter_path>/final; unset, "
          "<log_dir>/adapters. A run owns its folder: another run given it is refused (docs/reliability.md)."),
    ] = ""
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
        float, F("Deadline of each try of an inference request as a whole, from connecting to the reply's last "
                 "byte, in seconds (a reply is capped at 512 MiB).", flag="inference_timeout_s", gt=0)
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
    recompute_stale_logprobs: Annotated[
        bool,
        F("With max_async_level > 0: recompute the logprobs of tokens sampled from older weights under those "
          "weights (one more forward per older version in a step), so engine/logprob_gap_* measure the "
          "sampler's numerical gap on every step; off, they cover only tokens sampled from the weights that "
          "train, and the gap to older samples is async/stale_logprob_gap_* (the policy's drift included)."),
    ] = False
    routing_replay: Annotated[
        bool,
        F("Mixture-of-experts models: the sampler records the experts each token was routed to in every layer "
          "(prompt tokens included) and the trainer's forward routes each token to them, weighing them from its "
          "own router's scores (rollout routing replay, R3), so a token's ratio measures the policy, not routing "
          "noise (docs/models.md)."),
    ] = False
    partial_rollout_tokens: Annotated[
        int,
        F("With max_async_level > 0 and async_versions = \"latest\" on a server engine: sample each completion "
          "at most this many tokens at a time, and continue one still running on the newest version published "
          "by then (partial rollouts; each token keeps the version that drew it); 0 = off.", ge=0),
    ] = 0
    attention_kernel: Annotated[
        Literal["default", "flash", "triton", "tk", "cutlass"], F("Attention kernel hint.")
    ] = "default"
    dtype: Annotated[
        Literal["auto", "bf16", "fp8", "fp4"], F("Inference weight dtype.", flag="inference_dtype")
    ] = "auto"
    kv_cache_dtype: Annotated[Literal["auto", "bf16", "fp8", "int8"], F("KV-cache dtype.")] = "auto"
    prefix_caching: Annotated[bool, F("Reuse the KV cache of shared prompt prefixes.")] = True
