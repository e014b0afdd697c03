"""`[algorithm]` and the sections of its advantage and token-credit parts: `[gtpo]`, `[hicra]`,
`[planning]` (the detector HICRA and SEPA read), `[sepa]` and `[echo]`."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import msgspec

from retrain.config.sections.base import F, JsonTable, Section


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


class SepaConfig(Section):
    _prefix: ClassVar[str] = "sepa_"
    steps: Annotated[int, F("SEPA linear ramp length in steps.", ge=0)] = 500
    schedule: Annotated[Literal["linear", "auto"], F("SEPA schedule: linear or auto.")] = "linear"
    delay_steps: Annotated[int, F("Steps before the SEPA ramp starts.", ge=0)] = 50
    correct_rate_gate: Annotated[
        float, F("SEPA stays off until the running correct rate reaches this (sticky).", ge=0, le=1)
    ] = 0.1


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
