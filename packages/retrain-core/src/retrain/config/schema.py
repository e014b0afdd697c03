"""The TOML schema: one msgspec Struct per TOML section, and `TrainConfig` holding them.

Field names are the TOML keys. Each field's `Meta` carries its meaning (`description`), its
bounds (`ge`/`gt`/`le`/`lt`, checked by `retrain.validation.load`) and, under `extra["flag"]`, the
reference implementation's flat field name when it differs from `<prefix><key>`. The flat name
is what CLI flags (`--optim-beta1`), campaign condition overrides and config snapshots use, so
users' commands and files written for the reference keep working.

The sections live in `retrain.config.sections`, grouped by what they configure; this module
holds `TrainConfig` and the other config kinds and re-exports every section name, so imports
go through it. docs/configuration.md is generated from it (`retrain.validation.page`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from retrain.config.sections.algorithm import (
    AlgorithmConfig,
    EchoConfig,
    GtpoConfig,
    HicraConfig,
    PlanningConfig,
    SepaConfig,
)
from retrain.config.sections.backend import (
    BackendConfig,
    InferenceConfig,
    LoraConfig,
    ModelConfig,
    OptimizerConfig,
)
from retrain.config.sections.base import F, JsonTable, Section
from retrain.config.sections.run import LoggingConfig, PluginsConfig, ResumeConfig
from retrain.config.sections.task import DataConfig, EnvironmentConfig, EvalConfig, RewardConfig
from retrain.config.sections.teacher import TeacherConfig
from retrain.config.sections.training import (
    LOSS_AGGREGATIONS,
    MAX_ASYNC_LEVEL,
    POLICY_LOSS_MODES,
    RATIO_LEVELS,
    BackpressureConfig,
    LossAggregation,
    OptimizerBatchConfig,
    RatioLevel,
    TrainerName,
    TrainingConfig,
)

__all__ = [
    "KEY_ALIASES", "KIND_TABLES", "LOSS_AGGREGATIONS", "MAX_ASYNC_LEVEL", "POLICY_LOSS_MODES", "RATIO_LEVELS", "SECTIONS",
    "AlgorithmConfig", "BackendConfig", "BackpressureConfig", "CampaignConfig", "DataConfig", "EchoConfig",
    "EnvironmentConfig", "EvalConfig", "F", "GtpoConfig", "HicraConfig", "InferenceConfig", "JsonTable",
    "LoggingConfig", "LoraConfig", "LossAggregation", "ModelConfig", "OptimizerBatchConfig", "OptimizerConfig",
    "PlanningConfig", "PluginsConfig", "RatioLevel", "ResumeConfig", "RewardConfig",
    "Section", "SepaConfig", "SqueezeConfig", "TeacherConfig", "TrainConfig", "TrainerName", "TrainingConfig",
]


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
    teacher: TeacherConfig = msgspec.field(default_factory=TeacherConfig)
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
