"""The tinker backend registers its metadata; until it is built, running it says so clearly."""

from __future__ import annotations

from importlib import metadata

import pytest

from retrain.backends import catalog
from retrain.backends.errors import BackendUnavailable


def test_entry_point_registers_the_definition() -> None:
    (ep,) = [e for e in metadata.entry_points(group="retrain.backends") if e.name == "tinker"]
    definition = ep.load()
    assert isinstance(definition, catalog.BackendDefinition)
    assert definition.distribution == "retrain-backends-tinker"
    entry = catalog.lookup("tinker")
    assert entry is not None and entry.installed and not entry.problems  # contract supported


def test_factory_names_the_distribution() -> None:
    from retrain.backends.tinker.create import create_backend

    with pytest.raises(BackendUnavailable, match="retrain-backends-tinker"):
        create_backend(object())
