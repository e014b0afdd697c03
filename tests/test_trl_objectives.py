"""GSPO (sequence-level ratios), CISPO, SAPO and the sampler-mismatch correction of the local
backend equal TRL 1.16's `GRPOTrainer` on the same inputs: loss and LoRA gradients within 1e-6
in fp32.

The case is tests/test_trl_parity.py's (one model and LoRA adapter, prompts of different
lengths, completions with and without EOS, a group of equal rewards, behaviour logprobs off
the current policy by N(0, 0.15) per token), fed to TRL by scripts/peer/trl_objectives.py:

- GSPO: `importance_sampling_level = "sequence"` with `clip_eps` 0.05 / `clip_eps_high` 0.08
  against TRL's `importance_sampling_level="sequence"` under loss types dapo, grpo and dr_grpo,
  and with the KL penalty (TRL's `beta`, weighted by the sequence ratio);
- CISPO: `policy_loss_mode = "cispo"`, `clip_eps = 0`, `clip_eps_high = 0.1` against TRL's
  `loss_type="cispo"` with `epsilon_high = 1.1` (TRL's cispo caps the ratio at epsilon_high
  itself and has no lower bound), token and sequence ratios;
- SAPO: `policy_loss_mode = "sapo"` (seq_mean_token_mean, TRL's sapo aggregation) at the
  default and at other temperatures, token and sequence ratios;
- the correction: each `[inference] importance_sampling_mode` against TRL's
  `vllm_importance_sampling_mode`, the case's logprobs being the sampler's; TRL computes the
  trainer's logprobs and the ratios itself (its `_generate_and_score_completions`).

Each case clips, truncates or masks some tokens or completions and not others, and the last
tests show that a changed mask, denominator, level, cap or temperature breaks the agreement.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from retrain.types import Datum

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PEER = REPO / "scripts" / "peer"
TOLERANCE = 1e-6
IS_CAP = 1.1


def _module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PARITY = _module("trl_parity_case", Path(__file__).with_name("test_trl_parity.py"))

# key -> (retrain flags, TRL run). Flags name the whole objective; every run has top_p = 1.
GSPO = ["--importance-sampling-level", "sequence", "--clip-eps", "0.05", "--clip-eps-high", "0.08"]
CISPO = ["--policy-loss-mode", "cispo", "--clip-eps-high", "0.1"]
SAPO = ["--policy-loss-mode", "sapo", "--loss-aggregation", "seq_mean_token_mean"]
SAPO_T = ["--sapo-temperature-pos", "0.8", "--sapo-temperature-neg", "1.5"]
GSPO_TRL = {"epsilon": 0.05, "epsilon_high": 0.08, "importance_sampling_level": "sequence"}
SEQUENCE = ["--importance-sampling-level", "sequence"]
RUNS: dict[str, tuple[list[str], dict[str, Any]]] = {
    "gspo/token_mean": (GSPO, {"loss_type": "dapo", **GSPO_TRL}),
    "gspo/seq_mean_token_mean": ([*GSPO, "--loss-aggregation", "seq_mean_token_mean"],
                                 {"loss_type": "grpo", **GSPO_TRL}),
    "gspo/constant": ([*GSPO, "--loss-aggregation", "constant"], {"loss_type": "dr_grpo", **GSPO_TRL}),
    "gspo/kl": ([*GSPO, "--kl-coef", "0.1"], {"loss_type": "dapo", "beta": 0.1, **GSPO_TRL}),
    "cispo/token": (CISPO, {"loss_type": "cispo", "epsilon": 0.2, "epsilon_high": 1.1}),
    "cispo/sequence": ([*CISPO, *SEQUENCE], {"loss_type": "cispo", "epsilon": 0.2, "epsilon_high": 1.1,
                                            "importance_sampling_level": "sequence"}),
    "sapo/token": (SAPO, {"loss_type": "sapo", "epsilon": 0.2}),
    "sapo/sequence": ([*SAPO, *SAPO_T, *SEQUENCE], {"loss_type": "sapo", "epsilon": 0.2,
                                                    "importance_sampling_level": "sequence",
                                                    "sapo_temperature_pos": 0.8, "sapo_temperature_neg": 1.5}),
    **{f"is/{mode}": (["--clip-eps", "0.2", "--importance-sampling-correction", "--importance-sampling-mode", mode,
                       "--importance-sampling-cap", str(IS_CAP)],
                      {"loss_type": "dapo", "epsilon": 0.2, "is_mode": mode, "is_cap": IS_CAP})
       for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")},
}


@pytest.fixture(scope="module")
def trl(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The case and TRL's losses and gradients on it (computed once for the module)."""
    from safetensors.torch import load_file

    trl_env = PARITY.load("trl_env")
    try:
        python = trl_env.ensure()
    except trl_env.PeerUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"TRL environment unavailable on CI: {exc}")
        pytest.skip(f"TRL environment unavailable (no package index?): {exc}")
    root = tmp_path_factory.mktemp("trl_objectives")
    case = PARITY.make_case(root)
    case["runs"] = [{"key": key, **run} for key, (_, run) in RUNS.items()]
    (root / "case.json").write_text(json.dumps(case))
    done = subprocess.run([str(python), str(PEER / "trl_objectives.py"), str(root / "case.json"),
                           str(root / "trl.st")], capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return {"case": case, "tensors": load_file(root / "trl.st")}


@functools.cache
def backend(model: str, adapter: str, flags: tuple[str, ...]) -> Any:
    """One backend per objective, reused: policy_gradients reads the datums, the mask and the
    weights afresh on every call, so the monkeypatches below still reach it."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    from retrain.backends.local.backend import LocalBackend
    from retrain.validation.load import load_config

    base = ["--model", model, "--devices", "cpu", "--seed", "0", "--lora-rank", str(PARITY.RANK),
            "--lora-alpha", str(PARITY.ALPHA), "--temperature", "1.0", "--top-p", "1.0",
            "--max-tokens", str(PARITY.MAX_TOKENS)]
    b = LocalBackend(load_config(None, [*base, *flags], import_plugins=False).config)
    result = set_peft_model_state_dict(b.model, load_file(Path(adapter) / "adapter_model.safetensors"))
    assert not result.unexpected_keys
    return b


def retrain_side(case: dict[str, Any], flags: list[str]) -> tuple[float, dict[str, torch.Tensor], dict[str, Any]]:
    b = backend(case["model"], case["adapter"], tuple(flags))
    b.model.zero_grad(set_to_none=True)
    out = b.policy_gradients(PARITY.datums_of(case))
    grads = {n: p.grad.detach().clone() for n, p in b.model.named_parameters()
             if p.requires_grad and p.grad is not None}
    return out.loss, grads, out.metrics


def gap(trl: dict[str, Any], key: str, loss: float, grads: dict[str, torch.Tensor]) -> float:
    """Largest absolute difference between retrain's loss/gradients and TRL's run `key`."""
    tensors = trl["tensors"]
    gaps = [abs(loss - float(tensors[f"{key}/loss"]))]
    names = [k[len(key) + 1:] for k in tensors if k.startswith(key + "/") and k.rsplit("/", 1)[-1]
             not in ("loss", "is_ratio")]
    assert names and set(names) == set(grads), sorted(set(names) ^ set(grads))[:4]
    gaps += [float((grads[n] - tensors[f"{key}/{n}"]).abs().max()) for n in names]
    return max(gaps)


@pytest.mark.parametrize("key", list(RUNS))
def test_objective_equals_trl(trl: dict[str, Any], key: str) -> None:
    loss, grads, metrics = retrain_side(trl["case"], RUNS[key][0])
    assert gap(trl, key, loss, grads) <= TOLERANCE
    assert all(g.abs().sum() > 0 for g in grads.values())
    if key.startswith(("gspo", "cispo")):  # the clip acts on some ratios and not on others
        assert 0 < metrics["clip_fraction"] < 1, metrics
    if key.startswith("is/"):
        capped = metrics["engine/is_masked_fraction" if key.endswith("mask") else "engine/is_truncated_fraction"]
        assert 0 < capped < 1, metrics
        assert metrics["engine/is_ratio_max"] > IS_CAP and metrics["engine/mismatch_kl"] > 0
        ratio = trl["tensors"][f"{key}/is_ratio"]
        affected = (ratio == 0) if key.endswith("mask") else (ratio == IS_CAP)
        assert bool(affected.any()) and not bool(affected.all())


def _swap(flags: list[str], name: str, value: str) -> list[str]:
    out = list(flags)
    out[out.index(name) + 1] = value
    return out


# (the retrain objective, TRL's run it must no longer equal)
CHANGED: dict[str, tuple[list[str], str]] = {
    "GSPO ratio as the product (sum of log-ratios), not the mean": (GSPO, "gspo/token_mean"),
    "GSPO at token level": (["--clip-eps", "0.05", "--clip-eps-high", "0.08"], "gspo/token_mean"),
    "GSPO under another denominator": ([*GSPO, "--loss-aggregation", "seq_mean_token_mean"], "gspo/token_mean"),
    "CISPO with another cap": (_swap(CISPO, "--clip-eps-high", "0.2"), "cispo/token"),
    "CISPO as the clipped PPO loss": (["--clip-eps", "1.0", "--clip-eps-high", "0.1"], "cispo/token"),
    "SAPO with its temperatures swapped": (
        [*SAPO, "--sapo-temperature-pos", "1.05", "--sapo-temperature-neg", "1.0"], "sapo/token"),
    "SAPO under the token mean": (_swap(SAPO, "--loss-aggregation", "token_mean"), "sapo/token"),
    "mask instead of truncate": (RUNS["is/token_mask"][0], "is/token_truncate"),
    "truncate instead of mask": (RUNS["is/sequence_truncate"][0], "is/sequence_mask"),
    "token ratios instead of sequence ratios": (RUNS["is/token_truncate"][0], "is/sequence_truncate"),
    "another cap": (_swap(RUNS["is/token_mask"][0], "--importance-sampling-cap", "1.3"), "is/token_mask"),
    "the sequence correction as a mean of log-ratios": (RUNS["is/sequence_mask"][0], "is/sequence_mask"),
}


@pytest.mark.parametrize("change", list(CHANGED))
def test_a_changed_objective_fails(trl: dict[str, Any], monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    import retrain.backends.local.loss as loss
    import retrain.backends.local.mismatch as mismatch

    real = loss.per_sequence
    if change.startswith("GSPO ratio as the product"):
        monkeypatch.setattr(loss, "per_sequence", lambda v, rows, reduce: real(v, rows, "sum"))
    if change.startswith("the sequence correction as a mean"):
        monkeypatch.setattr(mismatch, "per_sequence", lambda v, rows, reduce: real(v, rows, "mean"))
    flags, key = CHANGED[change]
    loss_value, grads, _ = retrain_side(trl["case"], flags)
    assert gap(trl, key, loss_value, grads) > 100 * TOLERANCE


@pytest.mark.parametrize("key", ["gspo/token_mean", "is/sequence_mask"])
def test_a_changed_mask_fails(trl: dict[str, Any], monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """The sequence ratio (a mean or a sum over the completion's tokens) and the denominators
    read the loss mask: leaving out the EOS token breaks the agreement."""
    monkeypatch.setattr(Datum, "loss_mask", PARITY.MASK_CHANGES["EOS left out"][0])
    loss_value, grads, _ = retrain_side(trl["case"], RUNS[key][0])
    assert gap(trl, key, loss_value, grads) > 100 * TOLERANCE
