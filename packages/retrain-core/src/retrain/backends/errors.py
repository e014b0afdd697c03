"""Errors shared by every backend distribution."""

from __future__ import annotations

from importlib import metadata


class BackendNotAvailable(RuntimeError):
    """A distribution that ships its metadata but not yet the implementation of a feature."""

    def __init__(self, distribution: str, feature: str) -> None:
        try:
            version = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            version = "?"
        self.distribution = distribution
        super().__init__(f"{feature} is not available in this version ({distribution} {version})")
