"""A new policy loss needs nothing edited in core or in the local backend: a third-party
distribution registers an `Objective` under entry-point group `retrain.objectives`,
`[training] policy_loss_mode` names it, validation reads its rules from its record (its own
check, token-level ratios only, one process, which backends compute it), the local backend
computes its loss and selection, and a run trains with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_run import retrain, write_tiny_run

from retrain.commands.plugins.run import describe
from retrain.config.errors import ConfigError
from retrain.validation.load import load_config

#: trains on the positive-advantage tokens only, picked over the whole batch, with the ratio
#: clipped to [1 - clip_eps, 1 + clip_eps], which it requires
OBJECTIVE = '''
from retrain.backends.objective import Objective


def band(clip_eps, clip_eps_high):
    return (1.0 - clip_eps, 1.0 + (clip_eps_high or clip_eps)) if clip_eps > 0 else None


def select(settings, terms):
    return terms.adv > 0


def loss(settings, terms):
    clipped = -terms.ratio.clamp(terms.lo, terms.hi) * terms.adv
    return terms.xp.where(terms.selected, clipped, clipped.detach() * 0.0)


def check(settings):
    if settings.clip_eps > 0:
        return []
    return [("clip_eps", "'positive_only' clips its ratio at 1 +- clip_eps, which is 0", "clip_eps = 0.2")]


OBJECTIVE = Objective("positive_only", loss, "the positive-advantage tokens, clipped", band=band,
                      select=select, check=check)
NOT_ONE = "a string"
'''


@pytest.fixture
def plugin(install_distribution) -> None:  # type: ignore[no-untyped-def]
    install_distribution("retrain-objective-tiny", "0.1.0",
                         {"retrain.objectives": {"positive_only": "tiny_objective:OBJECTIVE",
                                                 "not_one": "tiny_objective:NOT_ONE"}},
                         {"tiny_objective.py": OBJECTIVE})


def errors(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "c.toml"
    path.write_text('[model]\nmodel = "tiny"\n[training]\ntop_p = 1.0\n' + text)
    with pytest.raises(ConfigError) as info:
        load_config(path, [], import_plugins=False)
    return [issue.render() for issue in info.value.issues]


def test_validation_reads_the_plugin_objectives_record(tmp_path: Path, plugin: None) -> None:
    base = "policy_loss_mode = 'positive_only'\n"
    config = load_config(None, ["--model", "tiny", "--top-p", "1.0", "--policy-loss-mode", "positive_only",
                                "--clip-eps", "0.2"], import_plugins=False)
    assert config.config.training.policy_loss_mode == "positive_only"
    listed = describe(config.config, [])["kinds"]["objective"]  # `retrain plugins`, as for the built-ins
    assert {"standard", "cispo"} <= set(listed["builtins"]) and listed["entry_point_group"] == "retrain.objectives"
    assert {ep["name"]: ep["distribution"] for ep in listed["entry_points"]}["positive_only"] == "retrain-objective-tiny"
    assert not [w for w in config.warnings if "clip_eps" in w.render()]  # it clips: clip_eps is read
    (own,) = errors(tmp_path, base)
    assert "[training] clip_eps" in own and "'positive_only' clips its ratio" in own
    (level,) = errors(tmp_path, base + "clip_eps = 0.2\nimportance_sampling_level = 'sequence'\n")
    assert "[training] importance_sampling_level" in level and "'positive_only'" in level
    (several,) = errors(tmp_path, base + "clip_eps = 0.2\n[backend]\ndevices = 'cpu,cpu'\n")
    assert "with 2 devices" in several and "token selection spans the whole batch" in several
    tinker = errors(tmp_path, base + "clip_eps = 0.2\n[backend]\nbackend = 'tinker'\n")
    assert any("'positive_only' is not built yet for backend 'tinker'" in e for e in tinker), tinker
    (unknown,) = errors(tmp_path, "policy_loss_mode = 'positive'\n")
    assert "must be one of standard, kl_cov, clip_cov, cispo, sapo" in unknown and "positive_only" in unknown
    (wrong,) = errors(tmp_path, "policy_loss_mode = 'not_one'\n")
    assert "is not a retrain.backends.objective.Objective" in wrong


def test_the_local_backend_computes_the_plugin_objective(plugin: None) -> None:
    from retrain.backends.local.loss import PolicyLossConfig, policy_loss, select_tokens

    cfg = PolicyLossConfig(mode="positive_only", clip_eps=0.2)
    new = torch.tensor([-0.2, -1.0, -0.5], dtype=torch.float64, requires_grad=True)
    ratio = torch.tensor([1.5, 0.6, 1.25], dtype=torch.float64)
    old, adv = new.detach() - ratio.log(), torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64)
    selected = select_tokens(cfg, new, old, adv)
    assert selected.tolist() == [True, True, False]
    res = policy_loss(cfg, new, old, adv, selected)
    # tokens 1, 2 clipped to 1.2 and 0.8: no gradient through a clamped ratio; token 3 unselected
    assert res.per_token.tolist() == pytest.approx([-1.2, -0.8, 0.0])
    assert res.cov_fraction == pytest.approx(2 / 3) and res.clip_fraction == pytest.approx(1.0)
    with pytest.raises(ValueError, match="token-level"):
        PolicyLossConfig(mode="positive_only", level="sequence")


def test_a_torchrun_run_refuses_it_on_several_processes_in_validations_words(plugin: None) -> None:
    """A run torchrun started itself (one entry in `devices`) passes validation; the local
    backend's placement then refuses the settings several devices would have been refused for."""
    from retrain.backends.local.options import LocalOptions
    from retrain.backends.local.placement import refuse_distributed
    from retrain.errors import UserError

    config = load_config(None, ["--model", "tiny", "--top-p", "1.0", "--policy-loss-mode", "positive_only",
                                "--clip-eps", "0.2"], import_plugins=False).config
    with pytest.raises(UserError, match=r"\[training\] policy_loss_mode: policy_loss_mode = 'positive_only' with 2 "
                                        r"processes is not built yet.*token selection spans the whole batch"):
        refuse_distributed(config, LocalOptions(), 2)
    standard = load_config(None, ["--model", "tiny"], import_plugins=False).config
    refuse_distributed(standard, LocalOptions(), 2)  # nothing refused


@pytest.mark.slow  # a whole RL run of the tiny model; the two tests above cover validation and the loss
def test_a_run_trains_with_the_plugin_objective(tmp_path: Path, plugin: None) -> None:
    cfg = write_tiny_run(tmp_path, training={"policy_loss_mode": "positive_only", "clip_eps": 0.2, "top_p": 1.0})
    res = retrain(cfg)
    assert res.returncode == 0, res.stderr
    rows: list[dict[str, Any]] = [json.loads(line) for line in
                                  (tmp_path / "run" / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(row["policy_loss_mode"] == "positive_only" for row in rows)
    # a step that trained reports the share of tokens the objective picked (those with a
    # positive advantage): some, not all, when advantages are centred per group
    trained = [row for row in rows if not row["skipped"]]
    assert trained and all(0.0 < row["policy/cov_fraction"] < 1.0 for row in trained), rows
    assert (tmp_path / "run" / "adapters" / "final").is_dir()
