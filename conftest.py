"""Workspace-wide test settings: nothing reaches a hub, and torch uses one thread per worker
(pytest-xdist runs two workers on two cores); a fixture that installs a fake distribution."""

import os
import sys
from pathlib import Path

import pytest

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_name] = "1"
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _no_cached_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests write their own ./plugins folders (the default [plugins] search path); forget any
    `plugins` package an earlier test imported, and undo sys.path additions afterwards."""
    for name in [m for m in sys.modules if m == "plugins" or m.startswith("plugins.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", list(sys.path))


def _forget_entry_points() -> None:
    from retrain.backends import catalog
    from retrain.registry import entry_points

    catalog._entry_points.cache_clear()
    entry_points.names.cache_clear()
    entry_points.lookup.cache_clear()


@pytest.fixture
def install_distribution(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """install_distribution(name, version, entry_points, files) -> the site folder.

    A distribution laid out as an installer leaves it (its modules beside a
    `<name>-<version>.dist-info` holding METADATA and entry_points.txt) in a fresh folder put
    first on sys.path: how a third-party package reaches retrain. `entry_points` maps a group to
    {name: "module:attr"}; `files` maps paths under the site folder to their text. retrain's
    entry-point caches are forgotten on install and afterwards, and so are the modules imported
    from the folder.
    """
    sites: list[Path] = []

    def install(name: str, version: str, entry_points: dict[str, dict[str, str]],
                files: dict[str, str]) -> Path:
        site = tmp_path_factory.mktemp("site-packages")
        for rel, text in files.items():
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_text(text)
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text("".join(
            f"[{group}]\n" + "".join(f"{n} = {target}\n" for n, target in eps.items())
            for group, eps in entry_points.items()))
        monkeypatch.syspath_prepend(str(site))
        sites.append(site)
        _forget_entry_points()
        return site

    yield install
    _forget_entry_points()
    for mod in [m for m, v in sys.modules.items()
                if any(str(getattr(v, "__file__", None) or "").startswith(str(s)) for s in sites)]:
        del sys.modules[mod]
