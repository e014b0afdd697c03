"""CISPO on the Tinker backend: the service's `cispo` loss, with retrain's aggregation folded
into the advantages and the local backend's clip band as its thresholds, gives the local
backend's loss and the same weight on every token's logprob (tests/test_tinker_parity.py's
construction, evaluated with the formula Tinker documents). The stand-in server of the
end-to-end tests (skyrl-tx 0.3.0) has no cispo loss, so the service itself is not run here."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from retrain.backends.local.backend import LocalBackend
from retrain.backends.local.batch import collate
from retrain.backends.local.loss import PolicyLossConfig, policy_loss
from retrain.backends.tinker.loss import evaluate, rl_datums, service_loss
from retrain.config.schema import LOSS_AGGREGATIONS


def _parity() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tinker_parity_case", Path(__file__).with_name("test_tinker_parity.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PARITY = _parity()


# the tiny local backend the parity tests compare against (a module-scoped fixture)
backend = PARITY.backend


def test_the_service_losses_of_each_mode() -> None:
    assert service_loss("standard", 0.0, 0.0) == ("importance_sampling", None)
    loss_fn, config = service_loss("standard", 0.2, 0.28)
    assert loss_fn == "ppo" and config == pytest.approx({"clip_low_threshold": 0.8, "clip_high_threshold": 1.28})
    loss_fn, config = service_loss("cispo", 0.0, 4.0)
    assert loss_fn == "cispo" and config == {"clip_low_threshold": 0.0, "clip_high_threshold": 5.0}
    # cispo alone: retrain's default cap of 5 is sent, not left to the service's own default
    assert service_loss("cispo", 0.0, 0.0) == ("cispo", {"clip_low_threshold": 0.0, "clip_high_threshold": 5.0})
    for mode in ("sapo", "kl_cov", "clip_cov"):
        with pytest.raises(ValueError, match="no Tinker loss"):
            service_loss(mode, 0.2, 0.0)


@pytest.mark.parametrize("aggregation", LOSS_AGGREGATIONS)
@pytest.mark.parametrize("eps", [(0.0, 0.3), (0.6, 1.5)])
def test_cispo_loss_and_token_weights_match(backend: LocalBackend, aggregation: str,
                                            eps: tuple[float, float]) -> None:
    datums = PARITY.make_datums(1)
    grid, per_datum = PARITY.learner_logprobs(backend, datums)
    batch = collate(datums, backend.tokenizer.pad_token_id, backend.device, aggregation=aggregation,
                    max_tokens=PARITY.MAX_TOKENS)
    action = batch.action
    new = grid[action].clone().requires_grad_(True)
    cfg = PolicyLossConfig(mode="cispo", clip_eps=eps[0], clip_eps_high=eps[1])
    local = policy_loss(cfg, new, batch.old_logprobs[action].double(), batch.advantages[action].double())
    local_loss = (local.per_token * batch.weight[action].double()).sum()
    local_loss.backward()
    local_loss = local_loss.detach()

    loss_fn, config = service_loss("cispo", *eps)
    remote = evaluate(loss_fn, rl_datums(datums, aggregation, PARITY.MAX_TOKENS), per_datum, config)
    assert remote.loss == pytest.approx(float(local_loss), abs=1e-5)
    weights = torch.zeros_like(grid)
    weights[action] = new.grad
    for i, g in enumerate(remote.grads):
        np.testing.assert_allclose(g, weights[i, : len(g)].numpy(), atol=1e-5)
    assert remote.clip_fraction == pytest.approx(local.clip_fraction) and 0 < local.clip_fraction < 1
    assert remote.abs_kl == pytest.approx(local.abs_kl)
