"""DAPO's objectives in a real run of the tiny model, in process: with dynamic sampling no
group whose rewards tie reaches the loss and every step trains a full batch; a run with
dynamic sampling, the overlong penalty and the truncation mask stops on Ctrl-C and resumes
bit-identically; a masked completion weighs in the local loss as in TRL's."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from tiny_run import Messages, write_tiny_run

from retrain.io.log import read_jsonl
from retrain.training.dapo.dynamic import zero_variance
from retrain.training.interrupt import RunInterrupted
from retrain.training.telemetry import WALL_CLOCK_FIELDS
from retrain.training.trainers import rl as trainer_module
from retrain.training.trainers import train
from retrain.types import Datum
from retrain.validation.load import load_config

# the first character's parity: about half the groups of two completions tie
PARITY = '''
import os, signal

calls = [0]

def score(response, reference):
    calls[0] += 1
    if str(calls[0]) == os.environ.get("SIGINT_AT_CALL"):
        os.kill(os.getpid(), signal.SIGINT)
    return float(bool(response) and ord(response[0]) % 2 == 0)
'''

DAPO = {"batch_size": 4, "group_size": 2, "dynamic_sampling": True}


@pytest.fixture
def in_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "parity.py").write_text(PARITY)
    sys.modules.pop("parity", None)
    importlib.invalidate_caches()
    return tmp_path


def config_for(root: Path, name: str, **training: object) -> Any:
    cfg = write_tiny_run(root, name, training=training)
    cfg.write_text(cfg.read_text().replace('custom_module = "toy_reward"', 'custom_module = "parity"'))
    return load_config(cfg, [], import_plugins=False).config


def test_no_tied_group_reaches_the_loss_and_every_batch_is_full(in_root: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from retrain.backends.local.backend import LocalBackend

    steps: list[tuple[Any, Any]] = []
    updates: list[list[Datum]] = []
    advantages, train_step = trainer_module.advantages, LocalBackend.train_step

    def seen_advantages(flow: Any, rollouts: Any, backend: Any, **kw: Any) -> Any:
        adv = advantages(flow, rollouts, backend, **kw)
        steps.append((rollouts, adv))
        return adv

    def seen_update(self: Any, datums: Any, lr: float, weight_decay: float) -> Any:
        updates.append(list(datums))
        return train_step(self, datums, lr, weight_decay)

    monkeypatch.setattr(trainer_module, "advantages", seen_advantages)
    monkeypatch.setattr(LocalBackend, "train_step", seen_update)
    reporter = Messages()
    train(config_for(in_root, "run", max_steps=4, **DAPO), reporter)
    assert len(steps) == 4 and len(updates) == 4
    for (rollouts, adv), datums in zip(steps, updates, strict=True):
        trained = [g for g, d in zip(rollouts.groups, adv.dispositions, strict=True) if d.train]
        assert len(trained) == 4, [g.rewards.tolist() for g in rollouts.groups]
        assert not any(zero_variance(g) for g in trained)
        assert all(zero_variance(g) for g in rollouts.groups if g.dropped.startswith("dropped"))
        # what the backend trained on is exactly the completions of those groups
        assert datums == adv.datums
        want = sorted(tuple(g.prompt_ids + c.token_ids) for g in trained for c in g.completions)
        assert sorted(tuple(d.tokens) for d in datums) == want
    rows = read_jsonl(in_root / "run" / "logs" / "metrics.jsonl")
    assert [r["dynamic/batch_fill"] for r in rows] == [1.0] * 4
    assert sum(r["dynamic/groups_dropped"] for r in rows) > 0 and sum(r["dynamic/extra_rounds"] for r in rows) > 0
    assert all(r["dynamic/dropped_share"] == r["dynamic/groups_dropped"] / r["dynamic/groups_sampled"] for r in rows)
    assert all(r["num_datums"] == 8 for r in rows)
    # the step's reward is over every sampled completion, dropped groups included
    for (rollouts, _), r in zip(steps, rows, strict=True):
        assert r["mean_reward"] == pytest.approx(float(rollouts.rewards.mean()))
        assert rollouts.rewards.size == 2 * r["dynamic/groups_sampled"]
    totals = reporter.summary["dynamic_sampling"]
    assert totals["dropped"] == sum(int(r["dynamic/groups_dropped"]) for r in rows)
    assert totals["extra_rounds"] == sum(int(r["dynamic/extra_rounds"]) for r in rows)
    state = json.loads((in_root / "run" / "logs" / "trainer_state.json").read_text())
    assert state["dynamic_sampling"] == totals and state["example_idx"] == sum(r["dynamic/groups_sampled"] for r in rows)


def test_ctrl_c_then_resume_is_bit_identical_with_dapo(in_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = {**DAPO, "max_steps": 5, "max_tokens": 8, "overlong_buffer": 3, "mask_truncated_completions": True}
    train(config_for(in_root, "plain", **settings), Messages())
    plain = read_jsonl(in_root / "plain" / "logs" / "metrics.jsonl")
    assert sum(r["dynamic/extra_rounds"] for r in plain) > 0
    assert any(r["overlong/masked_completions"] for r in plain) and any(r["overlong/penalty_mean"] for r in plain)

    # a reward call of step 2: the interrupt lets step 2 finish, then saves
    calls = 2 * sum(int(r["dynamic/groups_sampled"]) for r in plain[:2]) + 3
    monkeypatch.setenv("SIGINT_AT_CALL", str(calls))
    sys.modules.pop("parity", None)
    with pytest.raises(RunInterrupted, match="interrupted after step 2"):
        train(config_for(in_root, "cut", **settings), Messages())
    logs = in_root / "cut" / "logs"
    assert len(read_jsonl(logs / "metrics.jsonl")) == 3
    monkeypatch.delenv("SIGINT_AT_CALL")
    resumed = load_config(in_root / "cut.toml", ["--resume", str(logs)], import_plugins=False).config
    train(resumed, Messages())
    def steady(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k not in WALL_CLOCK_FIELDS} for r in rows]

    assert steady(read_jsonl(logs / "metrics.jsonl")) == steady(plain)
    adapter = "adapters/final/adapter_model.safetensors"
    assert (in_root / "cut" / adapter).read_bytes() == (in_root / "plain" / adapter).read_bytes()
    state = lambda run: json.loads((in_root / run / "logs" / "trainer_state.json").read_text())  # noqa: E731
    assert state("cut")["dynamic_sampling"] == state("plain")["dynamic_sampling"]
    assert state("cut")["example_idx"] == state("plain")["example_idx"]


def test_a_masked_completion_weighs_in_the_local_loss_as_in_trl() -> None:
    """TRL zeroes a truncated completion's completion_mask: `dapo` (token_mean) divides by the
    unmasked tokens, `grpo` (seq_mean_token_mean) and `dr_grpo` (constant) still count the
    completion among the B they divide by."""
    import torch

    from retrain.backends.local.batch import collate
    from retrain.training.dapo.overlong import masked

    kept = Datum(tokens=[5, 6, 7, 8], logprobs=[0.0, -1.0, -1.0, -1.0], advantages=[0.0, 1.0, 1.0, 1.0],
                 mask=[0, 1, 1, 1])
    cut = masked(Datum(tokens=[5, 9, 9], logprobs=[0.0, -1.0, -1.0], advantages=[0.0, -1.0, -1.0], mask=[0, 1, 1]))
    cpu = torch.device("cpu")
    mean = collate([kept, cut], 0, cpu, aggregation="token_mean").weight
    assert mean[0].tolist() == pytest.approx([1 / 3] * 3) and not mean[1].any()
    seq = collate([kept, cut], 0, cpu, aggregation="seq_mean_token_mean").weight
    assert seq[0].tolist() == pytest.approx([1 / 6] * 3) and not seq[1].any()  # 1 / (B = 2 x 3 tokens)
    constant = collate([kept, cut], 0, cpu, aggregation="constant", max_tokens=4).weight
    assert constant[0].tolist() == pytest.approx([1 / 8] * 3)  # 1 / (B = 2 x max_tokens 4)
