"""retrain-envs registers its providers in the `retrain.environments` group, built against the
environment contract this core supports."""

from __future__ import annotations

from importlib import metadata

from retrain.environments import catalog
from retrain.environments.protocol import EnvironmentDefinition
from retrain.registry.entry_points import names


def test_providers_registered() -> None:
    assert {"verifiers", "openenv"} <= set(names("retrain.environments"))
    for ep in metadata.entry_points(group="retrain.environments"):
        if ep.name in ("verifiers", "openenv"):
            assert isinstance(ep.load(), EnvironmentDefinition)


def test_providers_pass_the_contract_check() -> None:
    for name in ("verifiers", "openenv"):
        entry = catalog.lookup(name)
        assert entry is not None and entry.distribution == "retrain-envs"
        assert entry.problems == [] and entry.status == "available" and entry.runnable
