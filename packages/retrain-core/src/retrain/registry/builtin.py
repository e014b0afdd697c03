"""Built-in names of every pluggable kind, and the entry-point group each kind reads.

These are names only (no implementation imports), so that config validation, `explain` and
`retrain plugins` can run on a machine without torch. A name that is not built in may come
from an installed package's entry point in the kind's group, or be a dotted path.
"""

from __future__ import annotations

from retrain.config.sections.training import POLICY_LOSS_MODES

#: kind -> entry-point group (DESIGN.md)
ENTRY_POINT_GROUPS: dict[str, str] = {
    "backend": "retrain.backends",
    "environment": "retrain.environments",
    "reward": "retrain.rewards",
    "data_source": "retrain.data",
    "advantage_mode": "retrain.advantages",
    "transform_mode": "retrain.transforms",
    "planning_detector": "retrain.planning",
    "trainer": "retrain.trainers",
    "tracker": "retrain.trackers",
    "objective": "retrain.objectives",
}

ADVANTAGE_MODES = ("grpo", "maxrl", "reinforce_pp")
TRANSFORM_MODES = (
    "none",
    "gtpo",
    "entropy_mask",
    "gtpo_hicra",
    "gtpo_sepa",
    "gtpo_sepa_amp",
    "gtpo_sepa_amp_c",
    "delight",
    "delight_sepa",
    "hard_delight",
)
ALGORITHM_MODES = (
    "grpo_none",
    "maxrl_none",
    "maxrl_gtpo",
    "maxrl_gtpo_hicra",
    "maxrl_gtpo_sepa",
    "reinforce_pp_none",
    "reinforce_pp_gtpo",
    "reinforce_pp_gtpo_sepa",
    "reinforce_pp_delight",
    "reinforce_pp_delight_sepa",
    "discover_entropic",
    "ttt_discover_entropic",
)
REWARDS = ("match", "strict", "partial", "math", "judge", "model", "custom")
PLANNING_DETECTORS = ("regex", "semantic")
DATA_SOURCES = ("math", "arithmetic", "dataset")
TRAINERS = ("retrain", "sft", "optimizer_replay", "command", "ttt_discover")
INFERENCE_ENGINES = ("pytorch", "max", "vllm", "sglang", "trtllm", "mlx", "openai")
#: where an inference-server engine looks when `[inference] url` is empty (each server's own default port)
INFERENCE_DEFAULT_URLS = {"vllm": "http://127.0.0.1:8000", "sglang": "http://127.0.0.1:30000",
                          "openai": "http://127.0.0.1:8000"}
ENVIRONMENT_PROVIDERS = ("verifiers", "openenv")
TRACKERS = ("wandb", "tensorboard", "mlflow", "trackio")
BACKPRESSURE = ("noop", "usl")

#: Canonical uncertainty kinds and the aliases accepted for them (case-insensitive).
UNCERTAINTY_ALIASES: dict[str, str] = {
    "surprisal": "surprisal",
    "token_surprisal": "surprisal",
    "neg_logprob": "surprisal",
    "negative_logprob": "surprisal",
    "nll": "surprisal",
    "shannon": "shannon_entropy",
    "entropy": "shannon_entropy",
    "token_entropy": "shannon_entropy",
    "shannon_entropy": "shannon_entropy",
    "predictive_variance": "predictive_variance",
    "pred_var": "predictive_variance",
    "bernoulli_variance": "predictive_variance",
}
UNCERTAINTY_KINDS = ("surprisal", "predictive_variance", "shannon_entropy")

#: Transforms and algorithm modes whose token advantages vary within a completion. The
#: reference listed only the GTPO family; the Delight family varies too (a gate per token),
#: so it is rejected on backends that keep one advantage per completion as well.
TOKEN_VARYING_TRANSFORMS = ("gtpo", "entropy_mask", "gtpo_hicra", "gtpo_sepa", "gtpo_sepa_amp",
                            "gtpo_sepa_amp_c", "delight", "delight_sepa", "hard_delight")
TOKEN_VARYING_ALGORITHMS = ("maxrl_gtpo", "maxrl_gtpo_hicra", "maxrl_gtpo_sepa", "reinforce_pp_gtpo",
                            "reinforce_pp_gtpo_sepa", "reinforce_pp_delight",
                            "reinforce_pp_delight_sepa")

#: What the built-in transforms read beyond their params table, by name, so that config
#: validation can tell which keys a transform leaves unread without importing it (a test checks
#: these against retrain.advantages.transform.BUILTIN_TRANSFORMS): GTPO weighting reads
#: [gtpo] beta and [algorithm] uncertainty_kind; HICRA [hicra] alpha; planning masks come from
#: the [planning] detector; the SEPA lambda from the [sepa] controller; the entropy mask reads
#: [algorithm] surprisal_mask_rho. The Delight family reads its `delight_*` params only.
GTPO_TRANSFORMS = ("gtpo", "entropy_mask", "gtpo_hicra", "gtpo_sepa", "gtpo_sepa_amp", "gtpo_sepa_amp_c")
HICRA_TRANSFORMS = ("gtpo_hicra",)
PLANNING_TRANSFORMS = ("gtpo_hicra", "gtpo_sepa", "gtpo_sepa_amp", "gtpo_sepa_amp_c")
SEPA_TRANSFORMS = ("gtpo_sepa", "gtpo_sepa_amp", "gtpo_sepa_amp_c", "delight_sepa", "hard_delight")
MASK_TRANSFORMS = ("entropy_mask",)
DELIGHT_TRANSFORMS = ("delight", "delight_sepa", "hard_delight")
#: The transform each built-in algorithm mode runs (retrain.advantages.algorithm.BUILTIN_ALGORITHMS).
ALGORITHM_TRANSFORMS: dict[str, str] = {
    "grpo_none": "none",
    "maxrl_none": "none",
    "maxrl_gtpo": "gtpo",
    "maxrl_gtpo_hicra": "gtpo_hicra",
    "maxrl_gtpo_sepa": "gtpo_sepa",
    "reinforce_pp_none": "none",
    "reinforce_pp_gtpo": "gtpo",
    "reinforce_pp_gtpo_sepa": "gtpo_sepa",
    "reinforce_pp_delight": "delight",
    "reinforce_pp_delight_sepa": "delight_sepa",
    "discover_entropic": "none",
    "ttt_discover_entropic": "none",
}

#: Every pluggable kind, as `retrain plugins` lists them.
KINDS = ("advantage_mode", "transform_mode", "algorithm_mode", "uncertainty_kind", "reward",
         "planning_detector", "data_source", "backend", "inference_engine", "backpressure",
         "environment", "trainer", "tracker", "objective")

#: Built-in names per kind.
NAMES: dict[str, tuple[str, ...]] = {
    "advantage_mode": ADVANTAGE_MODES,
    "transform_mode": TRANSFORM_MODES,
    "algorithm_mode": ALGORITHM_MODES,
    "uncertainty_kind": UNCERTAINTY_KINDS,
    "reward": REWARDS,
    "planning_detector": PLANNING_DETECTORS,
    "data_source": DATA_SOURCES,
    "inference_engine": INFERENCE_ENGINES,
    "backpressure": BACKPRESSURE,
    "environment": ENVIRONMENT_PROVIDERS,
    "trainer": TRAINERS,
    "tracker": TRACKERS,
    "objective": POLICY_LOSS_MODES,
}

_ADV = "retrain.advantages"
#: Where each built-in lives (`module:attr`; an attr that is a mapping is indexed by name).
#: Imported only when the name is resolved. Backends live in `retrain.backends.catalog`;
#: engines and environments in their own distributions.
TARGETS: dict[str, dict[str, str]] = {
    "advantage_mode": {n: f"{_ADV}.episode:BUILTIN_EPISODE" for n in ADVANTAGE_MODES},
    "transform_mode": {n: f"{_ADV}.transform:BUILTIN_TRANSFORMS" for n in TRANSFORM_MODES},
    "algorithm_mode": {n: f"{_ADV}.algorithm:BUILTIN_ALGORITHMS" for n in ALGORITHM_MODES},
    "reward": {
        "match": "retrain.rewards.boxed:MatchReward",
        "strict": "retrain.rewards.boxed:StrictMatchReward",
        "partial": "retrain.rewards.boxed:PartialCreditReward",
        "math": "retrain.rewards.verifiers:MathReward",
        "custom": "retrain.rewards.custom:CustomReward",
        "judge": "retrain.rewards.judge.scorer:build_judge",
        "model": "retrain.rewards.model.scorer:build_model_reward",
    },
    "planning_detector": {
        "regex": "retrain.planning.regex:RegexDetector",
        "semantic": "retrain.planning.semantic:SemanticDetector",
    },
    "data_source": {
        "arithmetic": "retrain.data.arithmetic:load_arithmetic",
        "math": "retrain.data.math:load_math",
        "dataset": "retrain.data.table.source:load_dataset_examples",
    },
    "trainer": {  # each a function (config, reporter, *, config_path) -> RunResult (retrain.training.trainers)
        "retrain": "retrain.training.trainers.rl:run_rl",
        "sft": "retrain.training.trainers.sft:run_sft",
        "ttt_discover": "retrain.training.trainers.discover:run_discover",
        "command": "retrain.training.trainers.command:run",
        "optimizer_replay": "retrain.training.trainers.optimizer_replay:run",
    },
    "tracker": {  # each a factory (config) -> Sink (retrain.training.trackers.sink)
        "wandb": "retrain.training.trackers.wandb:WandbSink",
        "tensorboard": "retrain.training.trackers.tensorboard:TensorBoardSink",
        "mlflow": "retrain.training.trackers.mlflow:MlflowSink",
        "trackio": "retrain.training.trackers.trackio:TrackioSink",
    },
    "objective": {n: f"retrain.backends.objectives.{n}:OBJECTIVE" for n in POLICY_LOSS_MODES},
    "backpressure": {
        "noop": "retrain.training.backpressure:NoopBackpressure",
        "usl": "retrain.training.backpressure:UslBackpressure",
    },
}


def canonical_uncertainty(value: str) -> str | None:
    """Canonical built-in uncertainty kind for `value`, or None when it is not one."""
    return UNCERTAINTY_ALIASES.get(value.strip().lower())
