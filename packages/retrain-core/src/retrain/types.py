"""Typed records that cross package boundaries: samples, datums, step results.

Token ids and logprobs are plain lists here (core holds no tensors). Datum layout, shared by
every backend: `tokens` = prompt ids + completion ids; `logprobs` and `advantages` have the
same length, 0.0 on prompt positions, and position j holds the value for token j (predicted
at position j-1). `mask` marks the tokens the policy sampled: they are the loss's tokens and
what its denominators count, whatever their advantage (a zero advantage is zero credit, not
absence). A datum without a mask counts the tokens whose advantage is non-zero. A multi-turn
datum masks the environment's (observation) tokens out with 0, like its prompt
(retrain.rollout.episode).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

FinishReason = Literal["stop", "length"]
RouteDtype = Literal["uint8", "int16"]


class Routes(msgspec.Struct, frozen=True, kw_only=True):
    """The experts a mixture-of-experts model routed tokens to while sampling (rollout routing
    replay, `[inference] routing_replay`): the expert ids of shape `shape` = (positions,
    layers, k), C order, as bytes of `dtype` (uint8 up to 256 experts, int16 above), the form
    vLLM's `routed_experts` output takes. Position p is token p of the sequence the record
    belongs to; layer l is decoder layer l (a dense layer's entries are 0 and never read); a
    row lists its k experts in the order the router ranked them. Bytes keep the record
    compact and let it cross threads, processes and msgspec files as it is."""

    ids: bytes
    shape: tuple[int, int, int]
    dtype: RouteDtype = "uint8"

    @classmethod
    def of(cls, array: Any) -> Routes:
        """A record of `array` [positions, layers, k] (any integer dtype, ids >= 0)."""
        import numpy as np

        a = np.asarray(array)
        if a.ndim != 3:
            raise ValueError(f"routes are (positions, layers, k), not of shape {a.shape}")
        dtype: RouteDtype = "uint8" if a.size == 0 or int(a.max()) < 256 else "int16"
        return cls(ids=np.ascontiguousarray(a, dtype=dtype).tobytes(),
                   shape=(int(a.shape[0]), int(a.shape[1]), int(a.shape[2])), dtype=dtype)

    @property
    def positions(self) -> int:
        return self.shape[0]

    def array(self) -> Any:
        """The ids as a read-only numpy array of `shape`."""
        import numpy as np

        return np.frombuffer(self.ids, dtype=self.dtype).reshape(self.shape)

    def cut(self, start: int = 0, stop: int | None = None) -> Routes:
        """Positions `start` to `stop` (a slice's rules)."""
        return Routes.of(self.array()[start:stop])


class Completion(msgspec.Struct, kw_only=True):
    """One sampled completion: ids (never the prompt), behaviour logprobs, why it ended."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason = "stop"
    entropies: list[float] | None = None
    #: per token, the policy version that drew it, where a rollout moved to newer weights
    #: mid-way; None: every token from the batch's version (StepRollouts.policy_version)
    versions: list[int] | None = None
    #: a mixture-of-experts sampler's expert choices (`[inference] routing_replay`): one position
    #: per token of prompt + completion but the last (never fed back); None when not recorded
    routes: Routes | None = None


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    """How one step samples. `want_entropy` asks the backend for the Shannon entropy of each
    sampled position's distribution (`Completion.entropies`); a backend that cannot compute
    it raises instead of returning None.

    The filters apply in vLLM's order: softmax(logits / temperature), keep the `top_k` most
    likely tokens (0 = all), then the `top_p` nucleus of what is left (renormalised), then
    the tokens whose probability is at least `min_p` times the most likely one's (0 = off).
    `Completion.logprobs` are under that final, renormalised distribution.

    `seed` chooses the random stream. None (training): the backend's own stream, saved in
    its checkpoints. An int (evaluation): a fresh stream seeded with it, so the same call
    returns the same completions; the backend's own stream and its per-step counters
    (`runtime_metrics`) are left exactly as they were, so interleaving seeded calls never
    changes what the training calls draw or report.
    """

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    want_entropy: bool = False
    #: names the batch (the data cursor where it starts): a server engine derives each
    #: request's seed from it and the run's seed, so a batch sampled again after a resume gets
    #: the same draws; the in-process engine's own generator is checkpointed instead
    batch_id: int | None = None
    seed: int | None = None
    #: the published weights to sample from (retrain.backends.protocol.VersionedSampler: the
    #: count of RL updates in them); None: the latest. The producer names a batch's version
    #: when it samples ahead (`[training] max_async_level`)
    policy_version: int | None = None


class Datum(msgspec.Struct, kw_only=True):
    """`policy_version` counts the RL steps whose updates the sampling weights had seen: the
    step's own index when sampling waits for the previous update, up to `max_async_level`
    less when it runs ahead (retrain.training.producer)."""

    tokens: list[int]
    logprobs: list[float]
    advantages: list[float]
    policy_version: int = 0
    mask: list[int] | None = None  # 1 on sampled tokens, 0 on prompt (and observation) tokens
    #: ECHO (retrain.training.echo): per token, the weight of its term in the auxiliary
    #: supervised loss, sum over positions of -log p(token) * weight, added to the policy
    #: loss. Positive only on retained environment (observation) tokens; the weights already
    #: hold ECHO's normalisation, so a backend adds the plain weighted sum. None: no ECHO.
    echo_weights: list[float] | None = None
    #: the sampler's expert choices for the first `routes.positions` tokens (Completion.routes);
    #: the trainer's forward routes those tokens to them, any later one by its own router
    routes: Routes | None = None

    @property
    def prompt_length(self) -> int:
        for i, m in enumerate(self.loss_mask()):
            if m:
                return i
        return len(self.tokens)

    def loss_mask(self) -> list[bool]:
        if self.mask is not None:
            return [bool(m) for m in self.mask]
        return [a != 0.0 for a in self.advantages]


class TrainOutput(msgspec.Struct, kw_only=True):
    """What one optimizer update reports: the token-mean loss and backend diagnostics."""

    loss: float
    tokens: int = 0
    metrics: dict[str, float | int | str] = msgspec.field(default_factory=dict)


class Example(msgspec.Struct, kw_only=True):
    """A prompt with its verifiable reference; `completion` is an SFT target when known.
    `info` and `example_id` carry a source's own per-item data (the reference's fields).
    `messages`, when set, is the prompt as chat turns ({role, content}) the model reads through
    its chat template; `prompt` is then its last user turn (logs, the held-out hash)."""

    prompt: str
    reference: str = ""
    completion: str = ""
    task: str = "default"
    info: dict[str, Any] | None = None
    example_id: int | str | None = None
    messages: list[dict[str, str]] | None = None
