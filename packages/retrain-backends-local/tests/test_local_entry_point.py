"""The local backend registers itself and is created through the catalog."""

from __future__ import annotations

from importlib import metadata

from retrain.backends import catalog
from retrain.backends.create import create_backend


def test_entry_point_registers_the_definition() -> None:
    (ep,) = [e for e in metadata.entry_points(group="retrain.backends") if e.name == "local"]
    definition = ep.load()
    assert isinstance(definition, catalog.BackendDefinition)
    assert definition.distribution == "retrain-backends-local" and definition.available
    entry = catalog.lookup("local")
    assert entry is not None and entry.runnable


def test_created_through_the_catalog(tiny_config) -> None:  # type: ignore[no-untyped-def]
    from retrain.backends.local.backend import LocalBackend

    backend = create_backend(tiny_config())
    assert isinstance(backend, LocalBackend)
    assert backend.tokenizer.eos_token_ids == [2]
