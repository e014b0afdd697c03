"""`LocalOptions`: `[backend.options]` read once into a typed value, with the defaults and
coercions the schema states (retrain.backends.local.schema.LOCAL_OPTIONS)."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from retrain.backends.local.options import BUILT, LocalOptions
from retrain.backends.local.schema import LOCAL_OPTIONS, NOT_BUILT, TRAIN_SHARED
from retrain.backends.options import normalize_options


def test_it_holds_every_built_option_with_its_schema_default() -> None:
    assert set(BUILT) | set(NOT_BUILT) == set(LOCAL_OPTIONS) and not set(BUILT) & set(NOT_BUILT)
    defaults = asdict(LocalOptions())
    assert list(defaults) == list(BUILT)
    assert all(defaults[name] == LOCAL_OPTIONS[name].default for name in BUILT)
    with pytest.raises(AttributeError, match="liger_kernel"):
        _ = LocalOptions().liger_kernel  # not built: the backend cannot read it
    with pytest.raises(TypeError, match="sample_oscar_bits"):
        LocalOptions(sample_oscar_bits=4)


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
    normalised, issues = normalize_options("unsloth", {"train_microbatch_size": 3}, TRAIN_SHARED)  # as unsloth's
    assert not issues
    o = LocalOptions.read(normalised)
    assert o.train_microbatch_size == 3 and o.sample_decoder == "auto" and o.cuda_expandable_segments == "auto"


def test_an_expandable_mode_outside_the_schema_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="must be off, auto or on"):
        LocalOptions.read({"cuda_expandable_segments": "sometimes"})


def test_the_kernels_option_offers_the_kernels_modes() -> None:
    from retrain.kernels import accelerators

    spec = LOCAL_OPTIONS["kernels"]
    assert spec.default == "auto" and spec.choices == accelerators.MODES
    options, issues = normalize_options("local", {"kernels": "torch"}, LOCAL_OPTIONS)
    assert not issues and options["kernels"] == "torch"
    _, issues = normalize_options("local", {"kernels": "cuda"}, LOCAL_OPTIONS)
    assert issues
