"""Bounds: each field's own range (from the schema) and the rules that tie fields together."""

from __future__ import annotations

import re
import string
from collections.abc import Callable

from retrain.config.errors import ConfigIssue
from retrain.config.fields import all_fields, by_flat, get_value, parse_devices
from retrain.config.schema import MAX_ASYNC_LEVEL, TrainConfig
from retrain.validation.backend import backend_capabilities, backends_with, listed
from retrain.validation.built import NOT_BUILT_TEXT
from retrain.validation.environment import definition_of
from retrain.validation.objective import check_objective

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
OPTIMIZER_BATCH_ALLOWED_DIFFERENCES = ("backend.options.gradient_checkpointing",)
#: what `[training] trainer_command` may name (retrain.training.trainers.command fills them in)
PLACEHOLDERS = ("config_path", "log_dir", "adapter_path", "model")


def unknown_placeholders(template: str) -> list[str]:
    """Field names in `template` that are not placeholders; raises ValueError on a malformed one."""
    names = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    return [n for n in names if n not in PLACEHOLDERS]


def lab(flat: str) -> str:
    return by_flat()[flat].label


def _issue(flat: str, message: str, hint: str = "") -> ConfigIssue:
    return ConfigIssue(message, key=lab(flat), hint=hint)


def check_bounds(c: TrainConfig) -> list[ConfigIssue]:
    """Every rule's issues, in the order of `_RULES`."""
    return [issue for rule in _RULES for issue in rule(c)]


def _fields(c: TrainConfig) -> list[ConfigIssue]:
    """Each field against its own range; the hint is the default when that is in range."""
    issues: list[ConfigIssue] = []
    for spec in all_fields():
        value = get_value(c, spec)
        problem = spec.check_bounds(value)
        if problem:
            default = spec.default
            hint = f"{spec.key} = {default!r}" if spec.check_bounds(default) is None else ""
            issues.append(ConfigIssue(f"{value!r} {problem}", key=spec.label, hint=hint))
    return issues


def _clipping(c: TrainConfig) -> list[ConfigIssue]:
    t = c.training
    issues = check_objective(c)
    if t.clip_cov_min >= t.clip_cov_max:
        issues.append(_issue("clip_cov_min", f"{t.clip_cov_min} must be < clip_cov_max ({t.clip_cov_max})"))
    return issues


def _sft_pins(c: TrainConfig) -> list[ConfigIssue]:
    """Hashes are sha256s; an audit file comes with its hash and needs the SFT data it audits."""
    t = c.training
    issues: list[ConfigIssue] = []
    for flat in ("sft_data_sha256", "sft_audit_sha256", "sft_token_audit_sha256",
                 "optimizer_batch_expected_logical_sha256", "optimizer_batch_expected_manifest_sha256"):
        value = get_value(c, by_flat()[flat]).strip().lower()
        if value and not _HEX64.match(value):
            issues.append(_issue(flat, f"{value!r} is not a sha256 (64 hex characters)"))
    for path_flat, sha_flat in (("sft_audit_path", "sft_audit_sha256"),
                                ("sft_token_audit_path", "sft_token_audit_sha256")):
        path, sha = get_value(c, by_flat()[path_flat]), get_value(c, by_flat()[sha_flat])
        if bool(path) != bool(sha):
            issues.append(_issue(path_flat, f"{path_flat} and {sha_flat} must be set together"))
        if path and not t.sft_data_path:
            issues.append(_issue(path_flat, "needs sft_data_path"))
    if t.sft_token_audit_path and not (c.model.revision and c.model.local_files_only):
        issues.append(_issue("sft_token_audit_path", "needs [model] revision and local_files_only = true"))
    return issues


def _sft_data(c: TrainConfig) -> list[ConfigIssue]:
    """Who reads sft_data_path (trainer = sft, or the RL trainer's warmup) and how its rows are ordered."""
    t = c.training
    issues: list[ConfigIssue] = []
    if t.trainer == "sft" and not t.sft_data_path:
        issues.append(_issue("sft_data_path", "trainer = sft needs an SFT data file", 'sft_data_path = "data/sft.jsonl"'))
    if t.trainer == "sft" and t.sft_warmup_steps:
        issues.append(_issue("sft_warmup_steps", "is the RL trainer's warmup; trainer = sft trains max_steps "
                             "supervised steps", "remove it, or set max_steps"))
    if t.trainer == "retrain" and t.sft_data_path and not t.sft_warmup_steps:
        issues.append(_issue("sft_data_path", "is read by trainer = sft or by the RL trainer's warmup, and "
                             "sft_warmup_steps is 0", 'trainer = "sft", or sft_warmup_steps = N'))
    if t.trainer != "sft" and not t.sft_data_path:
        for flat, default in (("sft_batch_order", "shuffle"), ("sft_length_bucket_size", 0),
                              ("sft_reshuffle_each_epoch", False), ("sft_data_sha256", ""), ("sft_data_rows", 0)):
            if get_value(c, by_flat()[flat]) != default:
                issues.append(_issue(flat, f"ordering or pinning the warmup's [data] prompts is {NOT_BUILT_TEXT} (it "
                                     "orders and pins the rows of sft_data_path, which is not set)",
                                     'sft_data_path = "data/sft.jsonl", or remove it; warmup takes the [data] '
                                     "prompts in order"))
    if t.sft_length_bucket_size and t.sft_batch_order != "length_bucket":
        issues.append(_issue("sft_length_bucket_size", f"applies to sft_batch_order = 'length_bucket', not "
                             f"{t.sft_batch_order!r}", 'sft_batch_order = "length_bucket", or remove it'))
    return issues


def _trainer_command(c: TrainConfig) -> list[ConfigIssue]:
    t = c.training
    if t.trainer == "command" and not t.trainer_command.strip():
        return [_issue("trainer_command", "trainer = command needs a command template",
                       'trainer_command = "python train.py --config {config_path} --out {adapter_path}"')]
    if t.trainer_command and t.trainer != "command":
        return [_issue("trainer_command", "only used with trainer = command")]
    if not t.trainer_command:
        return []
    try:
        unknown = unknown_placeholders(t.trainer_command)
    except ValueError as exc:
        return [_issue("trainer_command", f"is not a valid template ({exc}); write literal braces as {{{{ and }}}}")]
    if unknown:
        return [_issue("trainer_command", f"unknown placeholder {{{unknown[0]}}} (available: "
                       f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)})")]
    return []


def _features(c: TrainConfig) -> list[ConfigIssue]:
    """ECHO, W&B checkpoint artifacts, TL-GRPO and back-pressure."""
    t, e, lg, bp = c.training, c.echo, c.logging, c.backpressure
    checks = (
        (e.enabled and e.weight <= 0, "echo_weight", "ECHO is enabled but its weight is 0", "weight = 0.05"),
        (e.require_live_observation_bridge and not e.enabled, "echo_require_live_observation_bridge",
         "needs [echo] enabled = true", ""),
        (e.target_retention == "all" and e.entropy_floor != 0.0, "echo_target_retention",
         "'all' needs [echo] entropy_floor = 0.0", ""),
        (lg.checkpoint_artifacts == "wandb" and "wandb" not in lg.tracker_names(), "checkpoint_artifacts",
         "'wandb' needs W&B on: [logging] wandb_project, or \"wandb\" in trackers", 'wandb_project = "my-project"'),
        (lg.checkpoint_artifacts == "wandb" and t.save_every <= 0, "checkpoint_artifacts",
         "'wandb' needs [training] save_every > 0", ""),
        (t.tl_grpo and t.tl_grpo_branch_mode not in ("action_space", "llm"), "tl_grpo_branch_mode",
         f"{t.tl_grpo_branch_mode!r} must be action_space or llm", ""),
        (t.tl_grpo and not 0 < t.tl_grpo_ema_decay < 1, "tl_grpo_ema_decay",
         f"{t.tl_grpo_ema_decay} must be in (0, 1) when tl_grpo is on", ""),
        (t.tl_grpo and t.tl_grpo_branch_size < 2, "tl_grpo_branch_size",
         f"{t.tl_grpo_branch_size} must be >= 2 when tl_grpo is on", ""),
        (bp.min_batch_size > bp.max_batch_size, "bp_min_batch_size",
         f"{bp.min_batch_size} must be <= max_batch_size ({bp.max_batch_size})", ""),
    )
    return [_issue(flat, message, hint) for refuse, flat, message, hint in checks if refuse]


#: DAPO's keys (retrain.training.dapo): read by the RL loop, and but for dynamic sampling
#: by TTT-Discover's; a command or plugin trainer receives them with the rest of the config
DAPO_KEYS = ("dynamic_sampling", "dynamic_sampling_max_rounds", "overlong_buffer", "overlong_penalty_factor",
             "mask_truncated_completions")


def _dapo(c: TrainConfig) -> list[ConfigIssue]:
    t = c.training
    issues: list[ConfigIssue] = []
    if t.trainer == "sft":
        defaults = type(t)()
        for key in DAPO_KEYS:
            if getattr(t, key) != getattr(defaults, key):
                issues.append(ConfigIssue(f"is read by the RL trainers, not trainer = {t.trainer!r}", key=lab(key),
                                          hint="remove it"))
        return issues
    if t.overlong_buffer > t.max_tokens:
        issues.append(ConfigIssue(f"{t.overlong_buffer} must be <= max_tokens ({t.max_tokens}): the penalty starts "
                                  "at max_tokens - overlong_buffer tokens", key=lab("overlong_buffer"),
                                  hint=f"overlong_buffer = {max(t.max_tokens // 4, 1)}"))
    provider = definition_of(c.environment.provider)
    if t.overlong_buffer and provider is not None and provider.capabilities.turn_bounded_episodes:
        issues.append(ConfigIssue(f"the overlong penalty of multi-turn episodes is {NOT_BUILT_TEXT} "
                                  f"({provider.title or provider.name} episodes are multi-turn; max_tokens bounds "
                                  "each turn, not the episode)",
                                  key=lab("overlong_buffer"), hint="overlong_buffer = 0"))
    if t.dynamic_sampling and t.tl_grpo:
        issues.append(ConfigIssue("cannot run with TL-GRPO: a TL-GRPO group trains on its turn-level advantages "
                                  "whatever its rewards, so a tied group is not empty of signal",
                                  key=lab("dynamic_sampling"), hint="dynamic_sampling = false, or tl_grpo = false"))
    return issues


def _inference(c: TrainConfig) -> list[ConfigIssue]:
    inf, caps = c.inference, backend_capabilities(c)
    issues: list[ConfigIssue] = []
    server = inf.engine != "pytorch"
    issues += _async(c, server)
    if server and not caps.inference_servers:
        readers = listed(backends_with("inference_servers")) or "another backend"
        issues.append(ConfigIssue(f"{inf.engine!r} samples for backend = {readers} only (got {c.backend.backend!r})",
                                  key=lab("inference_engine")))
    if server and str(c.backend.options.get("train_full_model", "false")).lower() in ("true", "1", "yes", "on"):
        issues.append(ConfigIssue(f"{inf.engine!r} with train_full_model = true is {NOT_BUILT_TEXT}: the server gets "
                                  "each update as a LoRA adapter, and reloading full weights into it every step "
                                  "(vLLM's /collective_rpc, SGLang's /update_weights_from_disk) is not driven",
                                  key=lab("inference_engine"), hint='engine = "pytorch", or train LoRA'))
    if inf.importance_sampling_correction and not caps.sampler_correction:
        correctors = listed(backends_with("sampler_correction")) or "one that applies it"
        issues.append(ConfigIssue(f"needs backend = {correctors} (the correction weights the {correctors} policy loss)",
                                  key=lab("importance_sampling_correction")))
    return issues + _routing_replay(c)


#: why an [inference] engine cannot hand the trainer the experts it routed each token to
ROUTELESS_ENGINES = {
    "vllm": "retrain does not read vLLM's routed_experts output yet (--enable-return-routed-experts needs vLLM's "
            "V2 model runner, which its CPU build cannot run, so no test here could check it)",
    "sglang": "SGLang's OpenAI-compatible server does not return the experts it routed to",
    "openai": "an OpenAI-compatible server does not return the experts it routed to",
}


def _routing_replay(c: TrainConfig) -> list[ConfigIssue]:
    """`routing_replay`: a backend that replays, an engine that records, single-turn rollouts."""
    inf, caps, key = c.inference, backend_capabilities(c), lab("routing_replay")
    if not inf.routing_replay:
        return []
    if not caps.routing_replay_engines:
        replayers = listed(backends_with("routing_replay_engines")) or "one that replays routing"
        return [ConfigIssue(f"needs backend = {replayers}: backend {c.backend.backend!r} cannot route its training "
                            "forward as the sampler did", key=key, hint="routing_replay = false")]
    issues: list[ConfigIssue] = []
    if inf.engine not in caps.routing_replay_engines:
        why = ROUTELESS_ENGINES.get(inf.engine, f"engine {inf.engine!r} does not return the experts it routed to")
        engines = listed([f'"{e}"' for e in caps.routing_replay_engines])
        issues.append(ConfigIssue(f'with engine = "{inf.engine}" is {NOT_BUILT_TEXT}: {why}', key=key,
                                  hint=f"engine = {engines}, or routing_replay = false"))
    provider = definition_of(c.environment.provider)
    if provider is not None and provider.capabilities.multi_turn:
        issues.append(ConfigIssue(f"with multi-turn episodes ({provider.title or provider.name}) is {NOT_BUILT_TEXT}: "
                                  "their turns carry no recorded routes", key=key,
                                  hint="routing_replay = false"))
    return issues


def _async(c: TrainConfig, server: bool) -> list[ConfigIssue]:
    """`max_async_level > 0`: what samples ahead, and what it combines with."""
    t, caps, key = c.training, backend_capabilities(c), lab("max_async_level")
    k = t.max_async_level
    if k == 0:
        return []
    issues: list[ConfigIssue] = []
    full = str(c.backend.options.get("train_full_model", "false")).lower() in ("true", "1", "yes", "on")
    # a remote service samples from saved sampler weights, apart from the ones that train
    if not server and not caps.samples_apart_from_training and not caps.in_process_async:
        issues.append(ConfigIssue(f'needs an inference server: backend {c.backend.backend!r} samples in-process '
                                  "from the very weights that train", key=key,
                                  hint='engine = "vllm" with url = ..., or max_async_level = 0'))
    elif not server and caps.in_process_async and full:
        issues.append(ConfigIssue(f'{k} with engine = "pytorch" and train_full_model = true is {NOT_BUILT_TEXT}: '
                                  "every version in flight would be a full copy of the weights", key=key,
                                  hint='train LoRA, or engine = "vllm", or max_async_level = 0'))
    if caps.max_async_level < k <= MAX_ASYNC_LEVEL:
        why = "samples from one published version of its weights at a time, so" if caps.max_async_level == 1 else \
            "samples"
        issues.append(ConfigIssue(f"{k}: backend {c.backend.backend!r} {why} at most {caps.max_async_level} "
                                  "batches ahead", key=key, hint=f"max_async_level = {caps.max_async_level}"))
    if c.backpressure.enabled:
        issues.append(ConfigIssue("cannot run with back-pressure: the next batch is sampled before this step's "
                                  "timing sizes it", key=key, hint="[backpressure] enabled = false"))
    issues += _partial(c, server)
    m = t.max_off_policy_steps
    if 0 < m < k and t.async_versions == "pinned":
        issues.append(ConfigIssue(f"{m} < max_async_level = {k} with async_versions = \"pinned\": every batch from "
                                  f"step {k} on is sampled exactly {k} updates behind, so all would be dropped",
                                  key=lab("max_off_policy_steps"),
                                  hint=f'max_off_policy_steps = 0, or async_versions = "latest", or max_async_level = {m}'))
    return issues


def _partial(c: TrainConfig, server: bool) -> list[ConfigIssue]:
    """`partial_rollout_tokens > 0` (with max_async_level > 0): what partial rollouts need."""
    inf, t, key = c.inference, c.training, lab("partial_rollout_tokens")
    if not inf.partial_rollout_tokens:
        return []
    refused = (
        (not server, f'with engine = "pytorch" is {NOT_BUILT_TEXT} (the in-process engine finishes a batch on its '
         "version)", 'engine = "vllm", or partial_rollout_tokens = 0'),
        (t.async_versions == "pinned", 'needs async_versions = "latest": a completion continues on whatever version '
         "is newest at each piece, which pinned versions' reproducibility rules out", 'async_versions = "latest"'),
        (inf.recompute_stale_logprobs, f"with recompute_stale_logprobs = true is {NOT_BUILT_TEXT} (the recomputation "
         "takes one version per datum)", "recompute_stale_logprobs = false"),
    )
    return [ConfigIssue(f"{inf.partial_rollout_tokens} {text}", key=key, hint=hint) for bad, text, hint in refused
            if bad]


def _optimizer_batch(c: TrainConfig) -> list[ConfigIssue]:
    ob, t = c.optimizer_batch, c.training
    issues: list[ConfigIssue] = []

    def err(flat: str, message: str) -> None:
        issues.append(ConfigIssue(message, key=lab(flat)))

    replay = t.trainer == "optimizer_replay"
    if replay:
        for flat in ("optimizer_batch_replay_path", "optimizer_batch_expected_logical_sha256",
                     "optimizer_batch_expected_manifest_sha256"):
            if not get_value(c, by_flat()[flat]):
                err(flat, "trainer = optimizer_replay needs it")
    elif ob.replay_path:
        err("optimizer_batch_replay_path", "only used with trainer = optimizer_replay")
    if ob.capture and replay:
        err("optimizer_batch_capture", "capture and replay are mutually exclusive")
    if ob.capture and t.trainer != "retrain":
        err("optimizer_batch_capture", "capture needs trainer = retrain")
    seen: set[str] = set()
    for item in ob.allow_config_differences:
        if item in seen:
            err("optimizer_batch_allow_config_differences", f"duplicate entry {item!r}")
        seen.add(item)
        if item not in OPTIMIZER_BATCH_ALLOWED_DIFFERENCES:
            err("optimizer_batch_allow_config_differences",
                f"{item!r} is not allowed (allowed: {', '.join(OPTIMIZER_BATCH_ALLOWED_DIFFERENCES)})")
    if ob.capture or replay:
        checks = [
            (backend_capabilities(c).optimizer_batch,
             f"needs backend = {listed(backends_with('optimizer_batch')) or 'one that captures optimizer batches'}"),
            (c.inference.engine == "pytorch", "needs engine = pytorch"),
            (len(parse_devices(c.backend.devices)) == 1, "needs exactly one device"),
            (t.max_steps == 1, "needs max_steps = 1"),
            (t.save_every == 0, "needs save_every = 0"),
            (t.sft_warmup_steps == 0, "needs sft_warmup_steps = 0"),
            (not c.backpressure.enabled, "needs backpressure disabled"),
            (not c.resume.from_, "starts fresh (the initial state is in the artifact): remove [resume] from"),
        ]
        # keyed on the capture/replay setting that imposes the rule, not on the live key it
        # constrains, so a refusal of the unbuilt feature supersedes these (validate.built)
        owner = "optimizer_batch_capture" if ob.capture else "trainer"
        for ok, message in checks:
            if not ok:
                err(owner, f"optimizer-batch capture/replay {message}")
    return issues


_RULES: tuple[Callable[[TrainConfig], list[ConfigIssue]], ...] = (
    _fields, _clipping, _sft_pins, _sft_data, _trainer_command, _features, _inference, _optimizer_batch, _dapo,
)
