"""Entry points of retrain-envs in the `retrain.environments` group: each provider and what
it does (config validation asks these records, never the names)."""

from __future__ import annotations

from retrain.environments.protocol import EnvironmentCapabilities, EnvironmentDefinition

# The environment contract this distribution was built against (retrain.environments.protocol).
CONTRACT = (1, 2)

VERIFIERS = EnvironmentDefinition(
    "verifiers", "retrain.environments.verifiers:create_environment", "retrain-envs", contract=CONTRACT,
    capabilities=EnvironmentCapabilities(
        multi_turn=True,
        episode_token_cap=True,
        # episodes in flight are bounded by rollout_env_workers
        rollout_buffer=False,
    ),
)
OPENENV = EnvironmentDefinition(
    "openenv", "retrain.environments.openenv:create_environment", "retrain-envs", contract=CONTRACT,
    title="OpenEnv",
    capabilities=EnvironmentCapabilities(
        multi_turn=True,
        observation_tokens=True,
        # a session resets with the episode's seed
        replays_episodes=True,
        turn_bounded_episodes=True,
        episode_limit="the OpenEnv provider's limit is args.context_window",
        episode_limit_hint="args = {context_window = N}",
        id_schemes=("http", "https", "ws", "wss"),
        id_form="an http(s):// or ws(s):// URL",
    ),
)
