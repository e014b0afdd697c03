"""The environment contract: what an environment provider registers in the
`retrain.environments` entry-point group, and the version of that contract.

Core holds the contract and the catalog (retrain.environments.catalog) as it does for backends;
providers (retrain-envs, third parties) hold the implementations under the same namespace.
"""

from __future__ import annotations

from dataclasses import dataclass

from retrain.registry.contract import Contract

#: The version of the environment contract: `EnvironmentDefinition` and the factory it names.
#: Checked against each provider's declared contract when its definition is loaded; the same
#: bump rules as `retrain.backends.protocol.BACKEND_CONTRACT`.
ENVIRONMENT_CONTRACT: Contract = (1, 0)


@dataclass(frozen=True)
class EnvironmentDefinition:
    """An environment provider as registered in the `retrain.environments` group.

    `factory` is a `module:attr` path to a callable `(TrainConfig) -> environment`, imported
    only when a run starts. `contract` is the environment contract the provider was built
    against, written as a literal. `available=False` marks a provider that ships its metadata
    only, or one whose contract this core does not support; `note` says which.
    """

    name: str
    factory: str
    distribution: str
    available: bool = True
    note: str = ""
    contract: Contract | None = None
