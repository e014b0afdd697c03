"""Keys of a feature this config leaves off: set away from their default, they would do nothing.

One table, `INERT`: each rule names keys, when they are read (`live`), why this config does
not read them (`off`) and the switch that would (`switch`). A key set away from its default
while its rule is not live gets one warning naming the key and the switch; the first rule that
is not live speaks for it. Nothing here is an error: none of these settings is harmful, and a
run may turn its feature on from the command line or a campaign condition. A key that nothing
reads at all is refused instead (`validate.built`).

Backend options that only CUDA reads are marked so in their backend's option schema
(`OptionSpec.cuda_only`, plugins included); the warning is about the configured
`[backend] devices` (all "cpu"), not about whether this machine has CUDA: the config is
checked the same anywhere, without torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from retrain.backends.objective import Objective, objective_of
from retrain.config.errors import ConfigIssue
from retrain.config.fields import FieldSpec, all_fields, get_value, parse_devices
from retrain.config.schema import POLICY_LOSS_MODES, TrainConfig
from retrain.evaluation.settings import EvalSchedule
from retrain.registry import builtin
from retrain.validation.backend import backend_entry
from retrain.validation.data import MAPPING_KEYS, TABLE_KEYS
from retrain.validation.objective import objective_in


@dataclass(frozen=True)
class Inert:
    """Keys ("section.key") read only while `live`."""

    keys: tuple[str, ...]
    live: Callable[[TrainConfig], bool]
    off: Callable[[TrainConfig], str]
    switch: str


def transform_of(c: TrainConfig) -> str | None:
    """The built-in transform the config runs, or None when a plugin decides (what a plugin
    reads is its own business: every key counts as live for it)."""
    a = c.algorithm
    if a.algorithm_mode:
        return builtin.ALGORITHM_TRANSFORMS.get(a.algorithm_mode)
    return a.transform_mode if a.transform_mode in builtin.TRANSFORM_MODES else None


def _transform_in(names: tuple[str, ...]) -> Callable[[TrainConfig], bool]:
    def live(c: TrainConfig) -> bool:
        name = transform_of(c)
        return name is None or name in names

    return live


def _transform_off(what: str) -> Callable[[TrainConfig], str]:
    return lambda c: f"transform {transform_of(c)!r} {what}"


def _on_gpu(c: TrainConfig) -> bool:
    return any(d != "cpu" for d in parse_devices(c.backend.devices))


def _said(text: str) -> Callable[[TrainConfig], str]:
    return lambda c: text


def _loss_off(c: TrainConfig) -> str:
    return f"policy_loss_mode = {c.training.policy_loss_mode!r}"


def _objective_has(fact: Callable[[Objective], bool]) -> Callable[[TrainConfig], bool]:
    """Live when the config's objective has `fact` (or does not resolve: check_objective says so)."""
    def live(c: TrainConfig) -> bool:
        objective = objective_in(c)
        return objective is None or fact(objective)
    return live


def _builtins_with(fact: Callable[[Objective], bool]) -> str:
    names = [f'"{name}"' for name in POLICY_LOSS_MODES if fact(objective_of(name))]
    return "[training] policy_loss_mode = " + (f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0])


def _clips(o: Objective) -> bool:
    return o.band is not None


def _dual(o: Objective) -> bool:
    return o.dual_clip


def _reads(keys: tuple[str, ...]) -> Callable[[Objective], bool]:
    return lambda o: set(keys) <= set(o.reads)


def _objective_inerts() -> tuple[Inert, ...]:
    """The keys each built-in objective's record says it reads, unread under an objective that
    does not; clip_eps / clip_eps_high under one without a band; clip_ratio_c without a dual clip."""
    own = tuple(
        Inert(tuple(f"training.{key}" for key in objective.reads), _objective_has(_reads(objective.reads)),
              _loss_off, f'[training] policy_loss_mode = "{objective.name}"')
        for objective in map(objective_of, POLICY_LOSS_MODES) if objective.reads)
    return (*own,
            Inert(("training.clip_eps", "training.clip_eps_high"), _objective_has(_clips),
                  lambda c: f"policy_loss_mode = {c.training.policy_loss_mode!r} does not clip the ratio",
                  _builtins_with(_clips)),
            Inert(("training.clip_ratio_c",), _objective_has(_dual),
                  lambda c: f"policy_loss_mode = {c.training.policy_loss_mode!r} has no dual clip",
                  _builtins_with(_dual)))


def _reads_a_table(c: TrainConfig) -> bool:
    """Whether a run reads a table `[data]`'s keys map: the `dataset` source, `[eval] data_path`,
    or (trainer = sft) `sft_data_path`."""
    return ((c.data.source == "dataset" and not c.environment.provider)
            or bool(c.eval.data_path and EvalSchedule.of(c).enabled)
            or (c.training.trainer == "sft" and bool(c.training.sft_data_path)))


_SERVER_ENGINES = '[inference] engine = "vllm", "sglang" or "openai"'
_EVAL_SWITCH = "[eval] every = N, before_train = true or at_end = true"
JUDGE_KEYS = ("reward.judge_model", "reward.judge_base_url", "reward.judge_api_key_env", "reward.judge_client")
#: what a judge and a served reward model both read
REQUEST_KEYS = ("reward.judge_concurrency", "reward.judge_retries")
MODEL_KEYS = ("reward.model", "reward.model_url", "reward.model_batch_size", "reward.model_template",
              "reward.model_score")
_TEACHER_OFF = _said("there is no teacher (no [teacher] model or url)")
_TEACHER_ON = '[teacher] model = "..." (or url)'

_TABLE_KEYS = tuple(f"data.{k}" for k in TABLE_KEYS)
_MAPPING_KEYS = tuple(f"data.{k}" for k in MAPPING_KEYS)

INERT: tuple[Inert, ...] = (
    Inert(("data.source", "data.path", "data.difficulty", *_TABLE_KEYS, "data.chat_template_kwargs"),
          lambda c: not c.environment.provider,
          lambda c: f"[environment] provider = {c.environment.provider!r} supplies the prompts",
          'no [environment] provider'),
    Inert(("data.path",), lambda c: c.data.source != "arithmetic",
          _said('source = "arithmetic" generates its problems'), '[data] source = "math" or "dataset"'),
    Inert(("data.difficulty",), lambda c: c.data.source not in ("math", "dataset"),
          _said('difficulty applies to source = "arithmetic"'), '[data] source = "arithmetic"'),
    Inert(_TABLE_KEYS, lambda c: c.data.source == "dataset",
          lambda c: f"[data] source = {c.data.source!r} reads no table", '[data] source = "dataset"'),
    Inert(_MAPPING_KEYS, _reads_a_table, lambda c: f"[data] source = {c.data.source!r} and no [eval] data_path: no "
          "table is read", '[data] source = "dataset", [eval] data_path, or trainer = "sft" on a table'),
    Inert(("eval.k", "eval.n", "eval.temperature", "eval.top_p", "eval.max_tokens", "eval.max_examples",
           "eval.pass_threshold", "eval.data_path"), lambda c: EvalSchedule.of(c).enabled,
          _said("evaluation during training is off (only `retrain eval` reads [eval])"), _EVAL_SWITCH),
    Inert(("planning.detector",), _transform_in(builtin.PLANNING_TRANSFORMS),
          _transform_off("uses no planning masks"), '[algorithm] transform_mode = "gtpo_hicra" or a gtpo_sepa one'),
    Inert(("planning.model", "planning.threshold"), lambda c: c.planning.detector != "regex",
          _said("the regex detector has no model or threshold"), '[planning] detector = "semantic"'),
    Inert(("gtpo.beta", "algorithm.uncertainty_kind"), _transform_in(builtin.GTPO_TRANSFORMS),
          _transform_off("does not weight credit by token uncertainty (GTPO)"),
          '[algorithm] transform_mode = "gtpo" or another gtpo* transform'),
    Inert(("hicra.alpha",), _transform_in(builtin.HICRA_TRANSFORMS), _transform_off("applies no HICRA"),
          '[algorithm] transform_mode = "gtpo_hicra"'),
    Inert(("algorithm.surprisal_mask_rho",), _transform_in(builtin.MASK_TRANSFORMS),
          _transform_off("masks no tokens"), '[algorithm] transform_mode = "entropy_mask"'),
    Inert(("sepa.steps", "sepa.schedule", "sepa.delay_steps", "sepa.correct_rate_gate"),
          _transform_in(builtin.SEPA_TRANSFORMS), _transform_off("does not read the SEPA lambda"),
          '[algorithm] transform_mode = "gtpo_sepa" (or another SEPA transform)'),
    Inert(("inference.url", "inference.concurrency", "inference.timeout_s", "inference.retries"),
          lambda c: c.inference.engine != "pytorch", _said('engine = "pytorch" samples in-process'), _SERVER_ENGINES),
    Inert(("inference.importance_sampling_cap", "inference.importance_sampling_mode"),
          lambda c: c.inference.importance_sampling_correction,
          _said("importance_sampling_correction is off"), "[inference] importance_sampling_correction = true"),
    Inert(("training.async_versions", "training.max_off_policy_steps", "inference.recompute_stale_logprobs",
           "inference.partial_rollout_tokens"),
          lambda c: c.training.max_async_level > 0, _said("nothing is sampled ahead (max_async_level = 0)"),
          "[training] max_async_level > 0"),
    Inert(("training.dynamic_sampling_max_rounds",), lambda c: c.training.dynamic_sampling,
          _said("dynamic sampling is off"), "[training] dynamic_sampling = true"),
    Inert(("training.overlong_penalty_factor",), lambda c: c.training.overlong_buffer > 0,
          _said("the overlong penalty is off (overlong_buffer = 0)"), "[training] overlong_buffer > 0"),
    Inert(("training.kl_estimator",), lambda c: c.training.kl_coef > 0, _said("the KL penalty is off (kl_coef = 0)"),
          "[training] kl_coef > 0"),
    *_objective_inerts(),
    Inert(("echo.weight", "echo.loss_fn", "echo.target_retention", "echo.max_tokens_per_step", "echo.max_token_ratio",
           "echo.entropy_floor", "echo.min_prompt_overlap"), lambda c: c.echo.enabled, _said("ECHO is off"),
          "[echo] enabled = true"),
    Inert(JUDGE_KEYS, lambda c: c.reward.type == "judge", lambda c: f"[reward] type = {c.reward.type!r}",
          '[reward] type = "judge"'),
    Inert(REQUEST_KEYS, lambda c: c.reward.type == "judge" or (c.reward.type == "model" and bool(c.reward.model_url)),
          lambda c: f"[reward] type = {c.reward.type!r}" + (" loads its model here" if c.reward.type == "model" else ""),
          '[reward] type = "judge", or type = "model" with model_url'),
    Inert((*MODEL_KEYS, "reward.model_api_key_env", "reward.model_label", "reward.model_device"),
          lambda c: c.reward.type == "model", lambda c: f"[reward] type = {c.reward.type!r}", '[reward] type = "model"'),
    Inert(("reward.model_api_key_env",), lambda c: bool(c.reward.model_url),
          _said("the reward model is loaded here (no model_url)"), "[reward] model_url"),
    Inert(("reward.model_device",), lambda c: not c.reward.model_url, _said("the reward model is served (model_url)"),
          '[reward] model_url = ""'),
    Inert(("reward.model_label",), lambda c: c.reward.model_score == "softmax",
          lambda c: f"model_score = {c.reward.model_score!r} reads a one-label head", '[reward] model_score = "softmax"'),
    Inert(("teacher.adapter", "teacher.api_key_env", "teacher.kl_coef", "teacher.reward_coef", "teacher.dtype",
           "teacher.device", "teacher.batch_size", "teacher.timeout_s", "teacher.retries", "teacher.concurrency"),
          lambda c: c.teacher.enabled, _TEACHER_OFF, _TEACHER_ON),
    Inert(("teacher.api_key_env", "teacher.timeout_s", "teacher.retries", "teacher.concurrency"),
          lambda c: bool(c.teacher.url), _said("the teacher is loaded here (no url)"), "[teacher] url"),
    Inert(("teacher.dtype", "teacher.device"), lambda c: not c.teacher.url, _said("the teacher is served (url)"),
          '[teacher] url = ""'),
    Inert(("training.tl_grpo_branch_mode", "training.tl_grpo_branch_size", "training.tl_grpo_lookahead_steps",
           "training.tl_grpo_ema_decay", "training.tl_grpo_ema_init"), lambda c: c.training.tl_grpo,
          _said("TL-GRPO is off"), "[training] tl_grpo = true"),
    Inert(("backpressure.warmup_steps", "backpressure.ema_decay", "backpressure.throttle_margin",
           "backpressure.increase_margin", "backpressure.min_batch_size", "backpressure.max_batch_size",
           "backpressure.peak_gflops", "backpressure.peak_bw_gb_s"), lambda c: c.backpressure.enabled,
          _said("back-pressure is off"), "[backpressure] enabled = true"),
    Inert(("logging.tracker_project",), lambda c: bool(c.logging.tracker_names()), _said("no tracker is selected"),
          '[logging] trackers = ["tensorboard"] (or "mlflow", "trackio", "wandb")'),
)


@cache
def _fields() -> dict[str, FieldSpec]:
    return {spec.dotted: spec for spec in all_fields()}


def _is_set(c: TrainConfig, key: str) -> bool:
    spec = _fields()[key]
    return bool(get_value(c, spec) != spec.default)


def _cuda_only_warnings(c: TrainConfig) -> list[ConfigIssue]:
    """The configured backend's options that its schema marks CUDA-only, set away from their
    default while `[backend] devices` are all "cpu" (options are coerced by validation already)."""
    if _on_gpu(c) or (entry := backend_entry(c)) is None:
        return []
    schema = entry.definition.option_schema or {}
    return [ConfigIssue(f"not read: the run trains on the CPU ({spec.cuda_only})", key=f"[backend.options] {name}",
                        hint='live with [backend] devices = "gpu:N"; or remove it')
            for name, spec in schema.items()
            if spec.cuda_only and name in c.backend.options and c.backend.options[name] != spec.default]


def inert_warnings(c: TrainConfig) -> list[ConfigIssue]:
    """One warning per key set away from its default while the feature it tunes is off.

    `c` is the validated config (backend options coerced and filled with their defaults)."""
    out: list[ConfigIssue] = []
    seen: set[str] = set()
    for rule in INERT:
        if rule.live(c):
            continue
        for key in rule.keys:
            if key not in seen and _is_set(c, key):
                seen.add(key)
                out.append(ConfigIssue(f"not read: {rule.off(c)}", key=_fields()[key].label,
                                       hint=f"live with {rule.switch}; or remove it"))
    return out + _cuda_only_warnings(c)


def inert_doc(dotted: str) -> str:
    """The configuration reference's note on when a key is read ('' when always)."""
    switches = [rule.switch for rule in INERT if dotted in rule.keys]
    return f"**Live with** {' and '.join(switches)}." if switches else ""
