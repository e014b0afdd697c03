"""The backend catalog: built-ins, entry points, dotted plugins and their hooks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from retrain.backends import catalog
from retrain.backends.options import normalize_options
from retrain.config.errors import ConfigError


def test_builtin_capabilities_match_the_contract() -> None:
    local = catalog.lookup("local")
    assert local is not None and local.source == "builtin"
    assert local.definition.capabilities.preserves_token_advantages
    prime = catalog.lookup("prime_rl")
    # no distribution ships it: core knows only where it would come from
    assert prime is not None and not prime.installed and not prime.definition.available
    assert prime.definition.distribution == "retrain-backends-prime" and prime.definition.option_schema is None
    assert catalog.lookup("nope") is None


def test_normalize_fills_defaults_and_coerces() -> None:
    LOCAL_OPTIONS = catalog.definition_of("local").option_schema
    assert LOCAL_OPTIONS is not None
    out, issues = normalize_options("local", {"liger_kernel": "off", "train_microbatch_size": "3"}, LOCAL_OPTIONS)
    assert not issues
    assert out["liger_kernel"] is False and out["train_microbatch_size"] == 3
    assert set(out) == set(LOCAL_OPTIONS)
    _, issues = normalize_options("local", {"train_microbatch_size": True}, LOCAL_OPTIONS)
    assert "expected an integer, got a boolean" in issues[0].message
    _, issues = normalize_options("local", {"train_microbatch_size": -1}, LOCAL_OPTIONS)
    assert "must be >= 0" in issues[0].message


def test_dotted_plugin_hooks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mybackend_xyz.py").write_text(
        "RETRAIN_BACKEND_CAPABILITIES = {'reports_sync_loss': True, 'preserves_token_advantages': True,\n"
        "  'supports_checkpoint_resume': False, 'resume_runtime_dependent': False}\n"
        "def retrain_backend_option_schema(options):\n"
        "    return {'speed': {'type': 'int', 'default': 1}}\n"
        "def make(config):\n    raise RuntimeError\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = catalog.dotted_plugin_entry("mybackend_xyz.make", {})
    assert entry.source == "plugin/hook"
    assert entry.definition.capabilities.preserves_token_advantages
    assert entry.definition.option_schema is not None
    out, issues = normalize_options("mybackend_xyz.make", {"speed": "4"}, entry.definition.option_schema)
    assert out == {"speed": 4} and not issues
    sys.modules.pop("mybackend_xyz", None)


def test_a_dotted_plugin_declares_the_settings_it_refuses(tmp_path: Path) -> None:
    from retrain.validation.load import load_config

    parsed = catalog._parse_capabilities({
        "reports_sync_loss": True, "preserves_token_advantages": True, "supports_checkpoint_resume": False,
        "resume_runtime_dependent": False,
        "refused_settings": [{"key": "training.min_p", "why": "its sampler has no min_p"}, {"key": "nope", "why": "x"}]})
    assert parsed is not None and [r.key for r in parsed.refused_settings] == ["training.min_p", "nope"]
    (tmp_path / "refusing_xyz.py").write_text(
        "RETRAIN_BACKEND_CAPABILITIES = {'reports_sync_loss': True, 'preserves_token_advantages': True,\n"
        "  'supports_checkpoint_resume': False, 'resume_runtime_dependent': False,\n"
        "  'refused_settings': [{'key': 'training.min_p', 'why': 'its sampler has no min_p'}, {'key': 'nope', 'why': 'x'}]}\n"
        "def make(config):\n    raise RuntimeError\n")
    (tmp_path / "c.toml").write_text(f"[plugins]\nsearch_paths = ['{tmp_path}']\n[backend]\nbackend = 'refusing_xyz.make'\n"
                                    "[training]\nmin_p = 0.1\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "c.toml", [])
    rendered = [i.render() for i in info.value.issues]
    assert any('[training] min_p: cannot be set with backend = "refusing_xyz.make": its sampler has no min_p' in r
               for r in rendered), rendered
    assert any("declares a refused setting 'nope' that is no config key" in r for r in rendered), rendered
    sys.modules.pop("refusing_xyz", None)


def test_describe_catalog_is_json_ready() -> None:
    import json

    data = catalog.describe_catalog()
    names = [b["name"] for b in data["builtins"]]
    assert names == ["local", "unsloth", "tinker", "prime_rl"]
    local = data["builtins"][0]["option_schema"]
    # the options its definition lists as not built
    assert local["liger_kernel"]["built"] is False and local["sample_cuda_graphs"]["built"] is True
    assert local["sample_cuda_graphs"]["cuda_only"] == "CUDA graphs need a CUDA device"
    json.dumps(data)
