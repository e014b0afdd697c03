"""The workspace shape DESIGN.md promises: seven namespace distributions, one-way dependencies."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = REPO / "packages"
MEMBERS = {
    "retrain-core", "retrain-kernels", "retrain-backends-local", "retrain-backends-tinker",
    "retrain-backends-unsloth", "retrain-envs", "retrain-cli",
}
HEAVY = {"torch", "transformers", "peft", "tinker", "verifiers", "triton", "unsloth"}


def deps(member: str) -> set[str]:
    meta = tomllib.loads((PACKAGES / member / "pyproject.toml").read_text())
    names = set()
    for spec in meta["project"].get("dependencies", []):
        name = spec.split(";")[0]
        for sep in "<>=!~[ ":
            name = name.split(sep)[0]
        names.add(name.strip().lower())
    return names


def test_seven_members_each_versioned_with_tests() -> None:
    assert {p.name for p in PACKAGES.iterdir() if p.is_dir()} == MEMBERS
    for member in MEMBERS:
        meta = tomllib.loads((PACKAGES / member / "pyproject.toml").read_text())
        assert meta["project"]["name"] == member
        assert meta["project"]["version"]
        assert meta["tool"]["uv"]["build-backend"]["namespace"] is True
        assert (PACKAGES / member / "tests").is_dir()
        assert any((PACKAGES / member / "tests").glob("test_*.py")), f"{member} has no tests"


def test_namespace_has_no_init() -> None:
    for member in MEMBERS:
        src = PACKAGES / member / "src" / "retrain"
        assert src.is_dir()
        assert not (src / "__init__.py").exists(), member
        assert not (src / "backends" / "__init__.py").exists(), member


def test_core_and_cli_do_not_depend_on_torch() -> None:
    assert not deps("retrain-core") & HEAVY
    assert not deps("retrain-cli") & HEAVY
    assert "torch" not in deps("retrain-backends-tinker")


def test_dependency_direction() -> None:
    assert not deps("retrain-core") & MEMBERS
    assert deps("retrain-kernels") & MEMBERS == {"retrain-core"}
    for member in MEMBERS - {"retrain-cli"}:
        assert "retrain-cli" not in deps(member)
    assert "retrain-backends-local" in deps("retrain-backends-unsloth")


def test_core_sources_import_no_heavy_package() -> None:
    for path in (PACKAGES / "retrain-core" / "src").rglob("*.py"):
        text = path.read_text()
        for heavy in HEAVY:
            assert f"import {heavy}" not in text and f"from {heavy} " not in text, (path, heavy)


def test_backend_entry_points_registered() -> None:
    for member, name in (("retrain-backends-local", "local"), ("retrain-backends-tinker", "tinker"),
                         ("retrain-backends-unsloth", "unsloth")):
        meta = tomllib.loads((PACKAGES / member / "pyproject.toml").read_text())
        assert name in meta["project"]["entry-points"]["retrain.backends"]
