"""retrain-envs registers its providers in the `retrain.environments` group."""

from __future__ import annotations

from importlib import metadata

from retrain.environments.definition import EnvironmentDefinition
from retrain.registry.entry_points import names


def test_providers_registered() -> None:
    assert {"verifiers", "openenv"} <= set(names("retrain.environments"))
    for ep in metadata.entry_points(group="retrain.environments"):
        if ep.name in ("verifiers", "openenv"):
            assert isinstance(ep.load(), EnvironmentDefinition)
