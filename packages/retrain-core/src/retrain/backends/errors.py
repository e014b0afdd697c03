"""Errors shared by every backend distribution."""

from __future__ import annotations

from importlib import metadata

from retrain.errors import UserError


class BackendUnavailable(UserError, RuntimeError):
    """The configured backend cannot run on this installation; the message says why and how."""

    @classmethod
    def not_built(cls, distribution: str, feature: str) -> BackendUnavailable:
        """A distribution that ships its metadata but not yet the implementation of `feature`."""
        try:
            version = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            version = "?"
        return cls(f"{feature} is not built yet in this version ({distribution} {version})")
