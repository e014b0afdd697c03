"""`LocalOptions`: `[backend.options]` read once into a typed value, with the defaults and
coercions the schema states (retrain.backends.options.LOCAL_OPTIONS)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from retrain.backends.local.options import READERS, LocalOptions
from retrain.backends.options import LOCAL_OPTIONS, UNSLOTH_OPTIONS, normalize_options


def test_every_field_has_a_reader_and_a_schema_key_with_its_default() -> None:
    assert [f.name for f in fields(LocalOptions)] == list(READERS)
    for f in fields(LocalOptions):
        assert f.name in LOCAL_OPTIONS, f.name
        assert f.default == LOCAL_OPTIONS[f.name].default, f.name


def test_normalised_defaults_read_as_the_field_defaults() -> None:
    normalised, issues = normalize_options("local", {}, LOCAL_OPTIONS)
    assert not issues and LocalOptions.read(normalised) == LocalOptions()


def test_given_options_are_coerced() -> None:
    raw = {"train_microbatch_size": "2", "sample_use_cache": "false", "cuda_expandable_segments": "1",
           "sample_decoder": "transformers", "lora_detach_input": True}
    normalised, issues = normalize_options("local", raw, LOCAL_OPTIONS)
    assert not issues
    o = LocalOptions.read(normalised)
    assert (o.train_microbatch_size, o.sample_use_cache, o.cuda_expandable_segments) == (2, False, "on")
    assert o.sample_decoder == "transformers" and o.lora_detach_input is True


def test_a_variant_schema_reads_its_missing_keys_as_defaults() -> None:
    normalised, issues = normalize_options("unsloth", {"train_microbatch_size": 3}, UNSLOTH_OPTIONS)
    assert not issues
    o = LocalOptions.read(normalised)
    assert o.train_microbatch_size == 3 and o.sample_decoder == "auto" and o.cuda_expandable_segments == "auto"


def test_an_expandable_mode_outside_the_schema_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="must be off, auto or on"):
        LocalOptions.read({"cuda_expandable_segments": "sometimes"})
