"""Dependency probes that never import the probed package (find_spec + distribution metadata)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from retrain.backends import catalog
from retrain.config.schema import TrainConfig
from retrain.plugins.resolve import is_dotted
from retrain.registry.contract import distribution_version


@dataclass(frozen=True)
class Component:
    name: str
    module: str
    hint: str
    distribution: str = ""

    @property
    def available(self) -> bool:
        return module_available(self.module)

    @property
    def version(self) -> str:
        return distribution_version(self.distribution or self.module) or ""


def module_available(module: str) -> bool:
    """True when `module` can be imported, without importing it (a parent package may be)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


RETRAIN_DISTRIBUTIONS = (
    "retrain-core",
    "retrain-kernels",
    "retrain-backends-local",
    "retrain-backends-tinker",
    "retrain-backends-unsloth",
    "retrain-envs",
    "retrain-cli",
)


def installed_versions(names: tuple[str, ...] = RETRAIN_DISTRIBUTIONS) -> dict[str, str | None]:
    """{distribution: version, or None when not installed}."""
    return {name: distribution_version(name) for name in names}


COMPONENTS: dict[str, Component] = {
    "math": Component("math", "math_verify", "pip install math-verify", "math-verify"),
    "semantic": Component("semantic", "sentence_transformers", "pip install sentence-transformers",
                          "sentence-transformers"),
    "verifiers": Component("verifiers", "verifiers", "pip install retrain-envs", "verifiers"),
    "openenv": Component("openenv", "websockets", "pip install retrain-envs", "websockets"),
    "wandb": Component("wandb", "wandb", "pip install wandb", "wandb"),
    "matplotlib": Component("matplotlib", "matplotlib", "pip install matplotlib", "matplotlib"),
}


def dependency_warnings(config: TrainConfig) -> list[str]:
    """What the configured components need that this machine lacks, one line each."""
    out: list[str] = []
    backend = config.backend.backend
    if not is_dotted(backend):
        entry = catalog.lookup(backend)
        if entry is not None and not entry.installed:
            out.append(f"backend {backend!r} needs {entry.definition.distribution}: {entry.definition.hint}")
        elif entry is not None and not entry.definition.available:
            out.append(f"backend {backend!r}: {entry.definition.note or 'not built yet in this version'}")
    needs = []
    if config.reward.type == "math":
        needs.append(("reward type 'math'", COMPONENTS["math"]))
    if config.planning.detector == "semantic":
        needs.append(("planning detector 'semantic'", COMPONENTS["semantic"]))
    if config.environment.provider == "verifiers":
        needs.append(("environment provider 'verifiers'", COMPONENTS["verifiers"]))
    if config.environment.provider == "openenv":
        needs.append(("environment provider 'openenv'", COMPONENTS["openenv"]))
    if config.logging.wandb_project:
        needs.append(("[logging] wandb_project", COMPONENTS["wandb"]))
    for what, comp in needs:
        if not comp.available:
            out.append(f"{what} needs {comp.module!r}: {comp.hint}")
    return out
