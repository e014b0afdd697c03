"""Multi-turn datums in the local backend's update: the environment's (observation) tokens get
no policy gradient, the policy's own tokens get exactly the gradient they get as single-turn
rows, and ECHO's auxiliary term is sum(-log p * w) over the observation tokens it keeps (p at the
training temperature, from the same head pass as the policy term)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import retrain.backends.local.logprobs as logprobs_module
from retrain.backends.local.backend import LocalBackend
from retrain.rollout.episode import Episode, Segment, Turn
from retrain.types import Datum


@pytest.fixture
def backend(tiny_config) -> LocalBackend:  # type: ignore[no-untyped-def]
    # padded rows: the spy reads the padded hidden states (packed rows give the same update:
    # test_local_packing.py)
    return LocalBackend(tiny_config("--backend-opt", "train_padding_free=false"))


def two_turn_episode(backend: LocalBackend) -> Episode:
    tok = backend.tokenizer
    prompt = tok.encode_prompt("3+4=")
    turns = [Turn(token_ids=[11, 12, 13, 2], logprobs=[-4.0, -3.9, -4.2, -3.0]),
             Turn(token_ids=[14, 15, 2], logprobs=[-4.1, -4.0, -3.5],
                  observation=[*tok.encode("<|user|>lower"), 5])]
    return Episode(segments=[Segment(prompt_ids=prompt, turns=turns)])


def hidden_gradients(backend: LocalBackend, datums: list[Datum], monkeypatch: pytest.MonkeyPatch
                     ) -> list[torch.Tensor]:
    """d loss / d (last hidden state) per row, from the backend's own update path. The hidden
    state at position p feeds only the head that predicts token p + 1, so a zero row here is
    a zero gradient for every logit of that prediction."""
    captured: list[torch.Tensor] = []
    original = logprobs_module.hidden_states

    def spy(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = original(model, input_ids, attention_mask)
        h.retain_grad()
        captured.append(h)
        return h

    monkeypatch.setattr(logprobs_module, "hidden_states", spy)
    backend.optimizer.zero_grad(set_to_none=True)
    backend.policy_gradients(datums)
    (h,) = captured
    assert h.grad is not None
    return [h.grad[i, :len(d.tokens) - 1] for i, d in enumerate(datums)]


def test_observation_tokens_get_zero_gradient_and_own_tokens_the_single_turn_one(
        backend: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    episode = two_turn_episode(backend)
    adv = [0.7, -0.3, 1.1, 0.4, -0.9, 0.5, 0.2]
    (datum,) = episode.datums(adv)
    p = len(episode.segments[0].prompt_ids)
    t1, t2 = episode.segments[0].turns
    obs_start = p + len(t1.token_ids)
    obs = range(obs_start, obs_start + len(t2.observation))
    assert [datum.mask[j] for j in obs] == [0] * len(obs)  # type: ignore[index]
    (grad,) = hidden_gradients(backend, [datum], monkeypatch)
    for j in obs:  # the head at j - 1 predicts observation token j
        assert torch.count_nonzero(grad[j - 1]) == 0, j
    for j in range(1, p):
        assert torch.count_nonzero(grad[j - 1]) == 0, j
    own = [j for j in range(len(datum.tokens)) if datum.mask[j]]  # type: ignore[index]
    assert all(torch.count_nonzero(grad[j - 1]) > 0 for j in own)

    # the same tokens as single-turn rows: turn 1 after the prompt; turn 2 after the prompt,
    # turn 1 and the observation taken as its prompt
    first = Datum(tokens=datum.tokens[:obs_start], logprobs=datum.logprobs[:obs_start],
                  advantages=datum.advantages[:obs_start],
                  mask=[0] * p + [1] * len(t1.token_ids))
    second = Datum(tokens=datum.tokens, logprobs=datum.logprobs, advantages=datum.advantages,
                   mask=[0] * (obs_start + len(t2.observation)) + [1] * len(t2.token_ids))
    g1, g2 = hidden_gradients(backend, [first, second], monkeypatch)
    for j in own:
        single = g1[j - 1] if j < obs_start else g2[j - 1]
        assert torch.allclose(grad[j - 1], single, rtol=1e-5, atol=1e-9), j


def test_echo_term_is_the_weighted_observation_nll(backend: LocalBackend) -> None:
    episode = two_turn_episode(backend)
    seg = episode.segments[0]
    n_obs = len(seg.turns[1].observation)
    layout = [False] * len(seg.turns[0].token_ids) + [True] * n_obs + [False] * len(seg.turns[1].token_ids)
    weights = [0.05 / n_obs if is_obs else 0.0 for is_obs in layout]
    (plain,) = episode.datums([0.0] * 7)
    (datum,) = episode.datums([0.0] * 7, echo=[weights])
    assert datum.echo_weights is not None and plain.echo_weights is None
    out = backend.policy_gradients([datum])
    ids = torch.tensor([datum.tokens])
    with torch.no_grad():
        logits = backend.model(input_ids=ids).logits.float()[0, :-1]
    # the same tempered distribution as the policy term: one head pass serves both
    lp = torch.log_softmax(logits / backend.temperature, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    w = torch.tensor(datum.echo_weights[1:])
    expected = float(-(lp * w).sum())
    assert out.metrics["echo/tokens"] == n_obs
    assert abs(float(out.metrics["echo/loss"]) - expected) < 1e-5
    assert any(p.grad is not None and torch.count_nonzero(p.grad) > 0 for p in backend.model.parameters())
