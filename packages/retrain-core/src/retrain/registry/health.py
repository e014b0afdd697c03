"""Dependency probes that never import the probed package (find_spec + distribution metadata)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

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
    "tensorboard": Component("tensorboard", "tensorboard", "pip install 'retrain-core[tensorboard]'", "tensorboard"),
    "mlflow": Component("mlflow", "mlflow", "pip install 'retrain-core[mlflow]'", "mlflow-skinny"),
    "trackio": Component("trackio", "trackio", "pip install 'retrain-core[trackio]'", "trackio"),
    "matplotlib": Component("matplotlib", "matplotlib", "pip install matplotlib", "matplotlib"),
}
