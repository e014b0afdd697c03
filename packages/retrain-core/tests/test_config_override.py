"""CLI overrides: flags, forms, booleans, mapping flags, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrain.config import ConfigError, parse_overrides
from retrain.validation.load import load_config


def test_forms_and_precedence(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("[training]\nlr = 0.1\nmax_steps = 3\n[algorithm]\ntransform_mode = 'delight'\n"
                 "[algorithm.transform_params]\ndelight_eta = 1\n")
    c = load_config(p, ["--lr", "1e-4", "--max-steps=9", "--training.batch_size", "3",
                        "--transform-param", "delight_k_frac=1e-4", "--transform-param", "delight_eta_adaptive=true",
                        "--backend-opt", "train_microbatch_size=2", "--resume", "logs/x"]).config
    assert c.training.lr == 1e-4 and c.training.max_steps == 9 and c.training.batch_size == 3
    assert c.algorithm.transform_params == {"delight_eta": 1, "delight_k_frac": 1e-4, "delight_eta_adaptive": True}
    assert c.backend.options["train_microbatch_size"] == 2
    assert c.resume.from_ == "logs/x"


def test_boolean_switches() -> None:
    o = parse_overrides(["--tl-grpo", "--no-prefix-caching", "--log-generations", "off"])
    assert o.values == {"tl_grpo": "true", "prefix_caching": "false", "log_generations": "off"}
    c = load_config(None, ["--bp-enabled", "--no-batch-advantage-norm", "--log-generations", "off"]).config
    assert c.backpressure.enabled is True and c.training.batch_advantage_norm is False
    assert c.logging.log_generations is False


def test_later_flag_wins() -> None:
    assert load_config(None, ["--lr", "0.1", "--lr", "0.2"]).config.training.lr == 0.2


def test_unknown_flag_suggests() -> None:
    with pytest.raises(ConfigError) as info:
        parse_overrides(["--max-step", "3", "--lrr", "1"])
    text = str(info.value)
    assert "--max-step: unknown flag (hint: did you mean --max-steps?)" in text
    assert "--lrr: unknown flag (hint: did you mean --lr?)" in text


def test_missing_value_and_bad_mapping() -> None:
    with pytest.raises(ConfigError, match="--lr: requires a value"):
        parse_overrides(["--lr"])
    with pytest.raises(ConfigError, match="is not key=value"):
        parse_overrides(["--backend-opt", "novalue"])


def test_bad_override_values_name_the_flag() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, ["--max-steps", "ten", "--top-p", "2"])
    text = str(info.value)
    assert "--max-steps: 'ten': expected an integer" in text
    assert "--top-p (command line): 2.0 must be <= 1" in text


def test_list_fields_from_text() -> None:
    c = load_config(None, ["--plugins-search-paths", "a, b"]).config
    assert c.plugins.search_paths == ["a", "b"]
    c = load_config(None, ["--plugins-search-paths", '["x"]']).config
    assert c.plugins.search_paths == ["x"]
