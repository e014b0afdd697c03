"""The verifiers provider (`[environment] provider = "verifiers"`): an installed verifiers 0.4
taskset as the prompt source, its `@vf.reward` functions as the reward."""

from retrain.environments.verifiers.environment import create_environment

__all__ = ["create_environment"]
