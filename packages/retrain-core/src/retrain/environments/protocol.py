"""The environment contract: what an environment provider registers in the
`retrain.environments` entry-point group, and the version of that contract.

Core holds the contract and the catalog (retrain.environments.catalog) as it does for backends;
providers (retrain-envs, third parties) hold the implementations under the same namespace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from retrain.registry.contract import Contract

if TYPE_CHECKING:
    from retrain.backends.protocol import Tokenizer, TrainBackend
    from retrain.rollout.group import StepRollouts
    from retrain.types import Example, SamplingParams

#: The version of the environment contract: `EnvironmentDefinition`, the factory it names and
#: the `Environment` that factory returns.
#: Checked against each provider's declared contract when its definition is loaded; the same
#: bump rules as `retrain.backends.protocol.BACKEND_CONTRACT`.
#: Within 1.0, `Group` lost its `train` and `note` fields: they were the loop's marks, written
#: on every group after `collect` returned it (an environment's values were overwritten, never
#: read), and which groups trained is now `StepAdvantages.dispositions`. No provider passed them
#: (retrain-envs never did); one that does gets a TypeError naming the field.
#: 1.1 added, all optional: `Segment.overlap`, `Turn.observation_mask`, and retrain.rollout.stitch for
#: environments that report each turn's whole prompt.
ENVIRONMENT_CONTRACT: Contract = (1, 1)


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


@runtime_checkable
class Environment(Protocol):
    """What a provider's factory returns: the run's prompt source and its rollouts in place of
    `[data]` and `[reward]`. The factory loads what it can before any model loads (a missing
    package, an unreachable server fail there); `open` runs once the backend exists.

    `collect` samples and scores one step's batch, `group_size` rollouts per example, and
    returns `retrain.rollout.group.StepRollouts` (multi-turn groups carry their
    `Episode`s). `state` is saved in checkpoints and handed back to `load_state` on resume.
    """

    def examples(self) -> Sequence[Example]: ...

    def encode(self, example: Example, tokenizer: Tokenizer) -> list[int]: ...

    def open(self, backend: TrainBackend) -> None: ...

    def collect(self, backend: TrainBackend, batch: Sequence[tuple[Example, list[int]]], *, group_size: int,
                sampling: SamplingParams) -> StepRollouts: ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...
