"""`retrain [CONFIG] [--flag value ...]`."""

from retrain.commands.run.run import run

__all__ = ["run"]
