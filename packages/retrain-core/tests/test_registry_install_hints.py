"""The install hints: one table (`retrain.registry.health.COMPONENTS`) that `retrain doctor`,
`retrain explain`, the preflight and each missing-package error read, and every hint printed
anywhere names a workspace distribution, and extra, that exists and installs the package."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from retrain.registry.health import COMPONENTS, install_hint

PACKAGES = Path(__file__).resolve().parents[2]
#: `pip install retrain-x` or `pip install 'retrain-x[extra]'` inside a hint
PIP_RETRAIN = re.compile(r"pip install (?:-U )?'?(retrain-[a-z-]+)(?:\[([a-z0-9_-]+)\])?'?")


def provided(distribution: str, extra: str = "") -> set[str] | None:
    """The distributions `pip install distribution[extra]` brings directly; None when the
    workspace has no such distribution or extra."""
    path = PACKAGES / distribution / "pyproject.toml"
    if not path.is_file():
        return None
    project = tomllib.loads(path.read_text())["project"]
    specs = project.get("optional-dependencies", {}).get(extra) if extra else project.get("dependencies", [])
    return None if specs is None else {canonicalize_name(Requirement(s).name) for s in specs}


def test_every_component_is_installed_by_the_distribution_its_hint_names() -> None:
    for name, c in COMPONENTS.items():
        assert c.name == name
        found = PIP_RETRAIN.fullmatch(c.hint.split(" (")[0])
        assert found, f"{name}: {c.hint!r} names no retrain distribution"
        brings = provided(found.group(1), found.group(2) or "")
        assert brings is not None, f"{name}: {c.hint!r} names a distribution or extra the workspace lacks"
        assert canonicalize_name(c.distribution) in brings, f"{name}: {c.provides} does not install {c.distribution}"


def test_hints_quote_an_extra_for_the_shell() -> None:
    assert install_hint("retrain-core[wandb]") == "pip install 'retrain-core[wandb]'"
    assert install_hint("retrain-envs", "why") == "pip install retrain-envs (why)"
    assert COMPONENTS["wandb"].hint == "pip install 'retrain-core[wandb]'"


def test_every_hint_in_the_sources_names_an_existing_distribution_and_extra() -> None:
    """Any string literal in the seven distributions' sources (f-strings' text included) that
    says `pip install retrain-...`: the distribution, and its extra, exist in the workspace."""
    stale = []
    for path in sorted(PACKAGES.glob("*/src/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for found in PIP_RETRAIN.finditer(node.value):
                    if provided(found.group(1), found.group(2) or "") is None:
                        stale.append(f"{path.relative_to(PACKAGES)}:{node.lineno}: {found.group(0)}")
    assert not stale, stale


def test_the_scan_sees_a_missing_extra() -> None:
    assert provided("retrain-core", "wandb") is not None
    assert provided("retrain-core", "no-such-extra") is None
    assert provided("retrain-no-such-dist") is None
