"""Entry points of retrain-envs in the `retrain.environments` group."""

from __future__ import annotations

from retrain.environments.protocol import EnvironmentDefinition

# The environment contract this distribution was built against (retrain.environments.protocol).
CONTRACT = (1, 0)

VERIFIERS = EnvironmentDefinition(
    "verifiers", "retrain.environments.verifiers:create_environment", "retrain-envs", available=False,
    note="verifiers environments are not built yet in this version",
    contract=CONTRACT,
)
OPENENV = EnvironmentDefinition(
    "openenv", "retrain.environments.openenv.load:create_environment", "retrain-envs", available=False,
    note="OpenEnv environments are not built yet in this version",
    contract=CONTRACT,
)
