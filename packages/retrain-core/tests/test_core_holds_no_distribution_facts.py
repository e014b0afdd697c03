"""retrain-core holds no built-in backend's or environment provider's facts: their definitions
ship with their distributions (capabilities, option schemas, not-built and CUDA-only options,
environment capabilities), and core names them only in its name -> distribution hint tables.

Scans the code of retrain-core (string literals that are not docstrings, and identifiers;
comments and docstrings may mention a backend) for the built-in names. A hit outside
`ALLOWED` fails; so does an `ALLOWED` entry that no longer matches anything (stale)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGES = Path(__file__).resolve().parents[2]
CORE = PACKAGES / "retrain-core" / "src" / "retrain"

#: names of built-in backends and environment providers, matched case-insensitively as words
NAMED = re.compile(r"(?<![a-z])(tinker|unsloth|prime_rl|prime-rl|openenv|verifiers)(?![a-z])", re.IGNORECASE)
#: "local" is an ordinary word: matched only where it names the backend
LOCAL = re.compile(r'^local$|backend\s*=\s*"?local\b|\blocal (backend|or|and)\b|\blocal, ')

#: file (relative to retrain/) -> (the names it may use, why)
ALLOWED: dict[str, tuple[frozenset[str], str]] = {
    "backends/catalog.py": (frozenset({"local", "unsloth", "tinker", "prime_rl"}),
                            "DISTRIBUTION_HINTS: the name -> distribution hint table"),
    "registry/builtin.py": (frozenset({"verifiers", "openenv"}),
                            "ENVIRONMENT_PROVIDERS, the providers' hint names; and retrain.rewards.verifiers, "
                            "the math-verify reward module (not the provider)"),
    "registry/health.py": (frozenset({"local", "unsloth", "tinker", "verifiers", "openenv"}),
                           "COMPONENTS and the distributions `retrain doctor` reports: which distribution to "
                           "install for each built-in name (a hint table)"),
    "config/sections/backend.py": (frozenset({"local", "unsloth", "tinker", "prime_rl"}),
                                   "the default backend (`local`), the field descriptions of the generated "
                                   "configuration reference, and the CLI flags tinker_throttle_dir / "
                                   "tinker_max_concurrent kept for existing command lines"),
    "config/schema.py": (frozenset({"local"}), "[campaign] launcher = \"local\" (a launcher, not the backend)"),
    "config/sections/task.py": (frozenset({"verifiers", "openenv"}),
                                "[reward] judge_client = \"verifiers\" (the judge client retrain-envs registers, "
                                "named after the verifiers package) and the field descriptions of the generated "
                                "configuration reference"),
    "config/migrate.py": (frozenset({"prime_rl"}), "the legacy [backend] prime_rl_* keys it migrates"),
    "rewards/judge/scorer.py": (frozenset({"verifiers"}), "the judge client named after the verifiers package"),
    "rewards/create.py": (frozenset({"verifiers"}), "retrain.rewards.verifiers, the math-verify reward module"),
}


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the Constant nodes that are docstrings."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _words(tree: ast.Module) -> tuple[list[str], list[str]]:
    """The string literals (docstrings left out) and the identifiers of a module."""
    skip = _docstrings(tree)
    strings: list[str] = []
    words: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            strings.append(node.value)
        elif isinstance(node, ast.Name):
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            words.append(node.name)
        elif isinstance(node, ast.arg):
            words.append(node.arg)
        elif isinstance(node, ast.alias):
            words += [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom):
            words.append(node.module or "")
    return strings, words


def _names_in(found: tuple[list[str], list[str]]) -> set[str]:
    """The built-in names used: any in identifiers or strings; `local` only in strings."""
    strings, identifiers = found
    named = {m.group(1).lower().replace("-", "_") for w in strings + identifiers for m in NAMED.finditer(w)}
    return named | ({"local"} if any(LOCAL.search(w) for w in strings) else set())


def test_core_names_no_builtin_backend_or_provider_outside_its_hint_tables() -> None:
    offending: dict[str, set[str]] = {}
    used: set[str] = set()
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE).as_posix()
        names = _names_in(_words(ast.parse(path.read_text(encoding="utf-8"))))
        allowed, _ = ALLOWED.get(rel, (frozenset(), ""))
        if names & allowed:
            used.add(rel)
        if extra := names - allowed:
            offending[rel] = extra
    assert not offending, f"built-in names in retrain-core outside the hint tables: {offending}"
    assert not set(ALLOWED) - used, f"stale ALLOWED entries: {sorted(set(ALLOWED) - used)}"


def test_the_scan_sees_a_name() -> None:
    """Guards the scanner: a message naming a backend is found, a docstring or comment is not."""
    tree = ast.parse('"""the tinker backend"""\n# unsloth\nhint = \'or backend = "local"\'\nx = "openenv"\n')
    assert _names_in(_words(tree)) == {"local", "openenv"}
    assert _names_in(_words(ast.parse('where = "a local copy"\nlocal = 1\n'))) == set()


def test_no_positional_backend_capabilities_anywhere() -> None:
    roots = [PACKAGES, PACKAGES.parent / "tests", PACKAGES.parent / "scripts"]
    positional = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if ".venv" in path.parts or "site-packages" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and node.args
                        and getattr(node.func, "id", getattr(node.func, "attr", "")) == "BackendCapabilities"):
                    positional.append(f"{path}:{node.lineno}")
    assert not positional, positional
