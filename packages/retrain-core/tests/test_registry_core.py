"""Name resolution for pluggable kinds: built-ins, registrations, entry points, dotted paths."""

import sys
from importlib import metadata

import pytest

from retrain.plugins.resolve import PluginError
from retrain.registry import builtin, entry_points
from retrain.registry.core import UnknownComponent, lookup, register, unregister


def test_every_builtin_target_imports():
    for kind, targets in builtin.TARGETS.items():
        for name in targets:
            found = lookup(kind, name)
            assert found.source == "builtin" and found.obj is not None, (kind, name)
        assert set(targets) <= set(builtin.NAMES[kind])


def test_registration_rules():
    with pytest.raises(ValueError, match="built-in"):
        register("transform_mode", "gtpo", object())
    with pytest.raises(ValueError, match="no dot"):
        register("transform_mode", "a.b", object())
    with pytest.raises(ValueError, match="kind"):
        register("nope", "x", object())
    register("reward", "test_reg", "X")
    try:
        assert lookup("reward", "test_reg").source == "registered"
    finally:
        unregister("reward", "test_reg")


def test_unknown_names_list_what_is_known():
    with pytest.raises(UnknownComponent, match="grpo, maxrl, reinforce_pp"):
        lookup("advantage_mode", "gpro")
    with pytest.raises(PluginError, match="no module"):
        lookup("advantage_mode", "missing_pkg_xyz.fn")


def test_entry_points_resolve(monkeypatch):
    ep = metadata.EntryPoint("test_ep", "math:sqrt", "retrain.advantages")
    monkeypatch.setattr(
        entry_points, "lookup", lambda group, name: ep if name == "test_ep" else None
    )
    found = lookup("advantage_mode", "test_ep")
    assert found.source == "entry_point" and found.obj(4) == 2.0


def test_dotted_paths_use_search_paths(tmp_path, monkeypatch):
    (tmp_path / "plugs").mkdir()
    (tmp_path / "plugs" / "thing.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        found = lookup("reward", "thing.VALUE", ("plugs",))
        assert found.obj == 7 and found.source == "plugin" and found.origin == "plugs.thing"
    finally:
        sys.modules.pop("plugs.thing", None)
        sys.modules.pop("plugs", None)
