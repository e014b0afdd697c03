"""The OpenEnv provider (`[environment] provider = "openenv"`, `id` = the server's URL):
multi-turn episodes against an OpenEnv server over its WebSocket."""

from retrain.environments.openenv.environment import create_environment

__all__ = ["create_environment"]
