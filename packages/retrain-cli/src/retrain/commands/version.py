"""Installed retrain distributions and their versions."""

from __future__ import annotations

from importlib import metadata

DISTRIBUTIONS = (
    "retrain-core",
    "retrain-kernels",
    "retrain-backends-local",
    "retrain-backends-tinker",
    "retrain-backends-unsloth",
    "retrain-envs",
    "retrain-cli",
)


def installed_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def versions_text() -> str:
    return "\n".join(f"{name} {version or '(not installed)'}" for name, version in installed_versions().items())
