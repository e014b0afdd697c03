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
#: 1.2 added `EnvironmentDefinition.capabilities` and `title` (defaults: what a provider that
#: declares nothing gets).
ENVIRONMENT_CONTRACT: Contract = (1, 2)


@dataclass(frozen=True, kw_only=True)
class EnvironmentCapabilities:
    """What a provider does, asked by config validation instead of its name."""

    #: its episodes are multi-turn, so [echo] has observations to train on with it
    multi_turn: bool = False
    #: its episodes carry the observation tokens [echo] trains on
    observation_tokens: bool = False
    #: replays an episode in a fresh session from its seed (what [training] tl_grpo needs)
    replays_episodes: bool = False
    #: max_tokens bounds each turn, not the episode: the overlong penalty is not built for it
    turn_bounded_episodes: bool = False
    #: reads [environment] max_episode_tokens (caps a multi-turn episode's tokens)
    episode_token_cap: bool = False
    #: what limits an episode instead, said when max_episode_tokens is set, and the hint then
    episode_limit: str = ""
    episode_limit_hint: str = "remove it"
    #: [environment] id must be a URL with one of these schemes (() = any id), described as
    id_schemes: tuple[str, ...] = ()
    id_form: str = ""
    #: [environment] rollout_buffer_size is built for it
    rollout_buffer: bool = True


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
    capabilities: EnvironmentCapabilities = EnvironmentCapabilities()
    #: how messages name it ("" = its name)
    title: str = ""


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
