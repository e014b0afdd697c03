"""The Delight transforms take their documented parameters or refuse them: an unknown
`delight_*` key is an error naming it (loading, the pipeline and `retrain trace` alike),
`delight_*` keys under a transform that reads none warn at load, and `[gtpo] beta` /
`[hicra] alpha`, which no Delight transform reads, warn at load naming the switch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retrain.advantages.pipeline import build_pipeline
from retrain.config.errors import ConfigError
from retrain.config.schema import SECTIONS, TrainConfig
from retrain.validation.load import load_config
from retrain.validation.trace import trace


def make_config(**sections: dict[str, Any]) -> TrainConfig:
    return TrainConfig(**{name: SECTIONS[name](**values) for name, values in sections.items()})


@pytest.mark.parametrize("transform", ["delight", "delight_sepa", "hard_delight"])
def test_an_unknown_delight_param_is_an_error_naming_it(transform: str) -> None:
    c = make_config(algorithm={"transform_mode": transform, "transform_params": {"delight_eta_mod": "fixed"}})
    with pytest.raises(ValueError, match=r"unknown Delight param 'delight_eta_mod' \(did you mean 'delight_eta_mode'"):
        build_pipeline(c)
    report = trace(c)
    assert not report.ok
    assert [i.message for i in report.issues if i.severity == "error" and "delight_eta_mod" in i.message]


def test_delight_params_under_another_transform(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("[algorithm]\ntransform_mode = 'gtpo'\n[algorithm.transform_params]\ndelight_etaa = 1.0\n")
    with pytest.raises(ConfigError) as info:
        load_config(p)
    [typo] = [i.render() for i in info.value.issues]
    assert "[algorithm.transform_params] delight_etaa: unknown key" in typo and "'delight_eta'" in typo
    p.write_text("[algorithm]\ntransform_mode = 'gtpo'\n[algorithm.transform_params]\ndelight_eta = 2.0\n")
    [warning] = [w.render() for w in load_config(p).warnings if "delight_eta" in w.render()]
    assert "not read by transform 'gtpo'" in warning and "'delight'" in warning


def test_gtpo_beta_and_hicra_alpha_do_not_move_delight_and_warn(tmp_path: Path) -> None:
    rewards = [1.0, 0.0, 0.5]
    logprobs = [[-0.2, -2.5, -0.9], [-1.1, -0.1], [-3.0, -0.4, -0.6, -0.05]]
    base = build_pipeline(make_config(algorithm={"transform_mode": "delight"}))
    moved = build_pipeline(make_config(algorithm={"transform_mode": "delight"}, gtpo={"beta": 0.9},
                                       hicra={"alpha": 1.0}))
    a, b = base.compute_group(rewards, logprobs), moved.compute_group(rewards, logprobs)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    p = tmp_path / "c.toml"
    p.write_text("[algorithm]\ntransform_mode = 'delight_sepa'\n[gtpo]\nbeta = 0.9\n[hicra]\nalpha = 1.0\n")
    warnings = [w.render() for w in load_config(p).warnings]
    for label in ("[gtpo] beta", "[hicra] alpha"):
        [w] = [w for w in warnings if w.startswith(f"{p}:") and f"{label}:" in w]
        assert "transform 'delight_sepa'" in w and "transform_mode" in w, w
