"""The error of a `[model] model` this machine cannot load (a missing folder, a hub id out of
reach, a packaged model not installed, a GGUF without its reader): a user error, exit 2."""

from __future__ import annotations

from retrain.errors import UserError


class ModelUnavailable(UserError, OSError):
    """`[model] model` names nothing this machine can load."""
