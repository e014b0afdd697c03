"""`retrain --version`: the installed retrain distributions."""

from __future__ import annotations

from retrain.registry.health import installed_versions


def versions_text() -> str:
    return "\n".join(f"{name} {version or '(not installed)'}" for name, version in installed_versions().items())
