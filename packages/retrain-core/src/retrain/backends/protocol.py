"""The backend contract the trainer programs against (spec/backends.md §1).

A backend owns the model, the tokenizer, sampling and the optimizer. The trainer talks to it
in token ids only and never imports torch. Checkpoints are directories the backend writes and
reads back; the trainer decides when and names them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from retrain.registry.contract import Contract
from retrain.types import Completion, Datum, SamplingParams, TrainOutput

#: The version of the backend contract: `TrainBackend` and `Tokenizer` below, the records in
#: `retrain.types` they exchange, and the `BackendDefinition` a distribution registers. Every
#: backend definition declares the contract it was built against and is checked against this
#: one when it is loaded (retrain.registry.contract). Bump the minor for an addition existing
#: backends need not implement, the major for any change they must follow.
#: 1.1 added the optional ChatTokenizer, 1.2 VersionedSampler and LeaderSampler. 2.0: a definition
#: states every fact of its backend (core supplies none to the built-in names), `BackendCapabilities`
#: takes keywords only, and its `remote_service` became the behaviours `service_settings`,
#: `samples_apart_from_training` and `refused_settings`; `not_built_options` was added. 2.1 added
#: `checkpoint_record` and `check_record` (a checkpoint that is a record of remote state). 2.2 added
#: `tokenizer` (the prompts' tokenizer without the model, for `retrain data`) and `export`
#: (`retrain export`'s writer of the trained weights, retrain.backends.export), and the optional
#: TeacherHost with the `teacher_models` capability (on-policy distillation).
BACKEND_CONTRACT: Contract = (2, 2)


@runtime_checkable
class Tokenizer(Protocol):
    eos_token_ids: Sequence[int]

    def encode_prompt(self, text: str) -> list[int]:
        """The prompt as the model sees it (chat template with a generation prompt)."""
        ...

    def encode(self, text: str) -> list[int]:
        """Plain text to ids, no special tokens (SFT targets)."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Ids to text, special tokens dropped."""
        ...

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """One string per id (planning detectors, surprisal logs)."""
        ...


@runtime_checkable
class ChatTokenizer(Tokenizer, Protocol):
    """A tokenizer that renders whole conversations (optional, contract 1.1): environments
    render system prompts, multi-message prompts and the observation tokens between turns
    with it."""

    def encode_chat(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True) -> list[int]:
        """The messages as the model sees them through its chat template, with the assistant's
        generation prompt appended when asked."""
        ...


@runtime_checkable
class TrainBackend(Protocol):
    tokenizer: Tokenizer

    def checkpoint(self, name: str) -> None:
        """Make the latest weights visible to sampling (a no-op when they share the model)."""
        ...

    def sample(self, prompts: Sequence[Sequence[int]], num_samples: int,
               params: SamplingParams) -> list[list[Completion]]:
        """`num_samples` completions per prompt, all prompts in one batch where possible;
        `Completion.entropies` is filled exactly when `params.want_entropy`; with
        `params.seed` set, drawn from that seed's stream without touching the backend's own
        (see SamplingParams)."""
        ...

    def train_step(self, datums: Sequence[Datum], lr: float, weight_decay: float) -> TrainOutput:
        """One optimizer update on the RL loss over `datums`."""
        ...

    def sft_step(self, datums: Sequence[Datum], lr: float, weight_decay: float) -> TrainOutput:
        """One optimizer update on the supervised loss (advantage 1 marks target tokens)."""
        ...

    def save_checkpoint(self, path: str) -> str:
        """Write everything needed to continue exactly (weights, optimizer, RNG) to `path`."""
        ...

    def load_checkpoint(self, path: str) -> None:
        ...

    def save_adapter(self, path: str) -> str:
        """Write the trained weights alone (a peft adapter for LoRA) and return their path."""
        ...

    def runtime_metrics(self) -> Mapping[str, float | int | str]:
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class VersionedSampler(Protocol):
    """A backend that samples from several published versions of its weights at once
    (optional, contract 1.2), so the trainer can sample up to `[training] max_async_level`
    batches ahead: each batch names its version in `SamplingParams.policy_version`, and a
    request finishes on the version it started with while newer ones are published."""

    def publish(self, version: int, *, keep: int) -> None:
        """Make the current weights visible to sampling as `version` (the count of RL updates
        in them). Versions older than `version - keep` are no longer asked for and may be
        released; `keep` newer ones stay available. Publishing a version twice is a no-op."""
        ...


@runtime_checkable
class LeaderSampler(Protocol):
    """A backend training on several processes whose training samples rank 0 alone draws (from
    an inference server; optional, contract 1.2): the loop samples and scores each batch on
    rank 0 and hands it to the other ranks with `broadcast`, a collective every rank calls."""

    leader_samples: bool

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj`, on every rank."""
        ...


@runtime_checkable
class AdapterLoader(Protocol):
    """A backend that can evaluate saved weights (`retrain eval --adapter/--run`)."""

    def load_adapter(self, path: str) -> None:
        """Load the trained weights of a `save_adapter` folder or a checkpoint; the optimizer
        and the random streams are left as they are."""
        ...


@runtime_checkable
class TeacherHost(Protocol):
    """A backend that loads a `[teacher] model` beside its student for on-policy distillation
    (optional, contract 2.2; its definition declares `BackendCapabilities.teacher_models`)."""

    def load_teacher(self, config: Any) -> Any:
        """The `[teacher]` of `config` (a TrainConfig) as a `retrain.teacher.protocol.Teacher`:
        frozen, in eval mode, in `[teacher] dtype`, on the student's device or the CPU; raises
        `retrain.teacher.tokens.TokenizerMismatch` when its tokenizer is not the student's."""
        ...
