"""Entry points of retrain-envs in the `retrain.environments` group."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvironmentDefinition:
    name: str
    factory: str  # module:attr of (TrainConfig) -> environment, imported when a run starts
    distribution: str
    available: bool = True
    note: str = ""


VERIFIERS = EnvironmentDefinition(
    "verifiers", "retrain.environments.verifiers:create_environment", "retrain-envs", available=False,
    note="verifiers environments are not built yet in this version",
)
OPENENV = EnvironmentDefinition(
    "openenv", "retrain.environments.openenv.load:create_environment", "retrain-envs", available=False,
    note="OpenEnv environments are not built yet in this version",
)
