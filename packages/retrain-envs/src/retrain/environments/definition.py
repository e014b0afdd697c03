"""Entry points of retrain-envs in the `retrain.environments` group."""

from __future__ import annotations

from retrain.environments.protocol import EnvironmentDefinition

# The environment contract this distribution was built against (retrain.environments.protocol).
CONTRACT = (1, 0)

VERIFIERS = EnvironmentDefinition(
    "verifiers", "retrain.environments.verifiers:create_environment", "retrain-envs", contract=CONTRACT,
)
OPENENV = EnvironmentDefinition(
    "openenv", "retrain.environments.openenv:create_environment", "retrain-envs", contract=CONTRACT,
)
