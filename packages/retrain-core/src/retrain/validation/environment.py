"""`[environment]`: the provider, its keys, and the features only a multi-turn provider feeds
(ECHO, TL-GRPO)."""

from __future__ import annotations

from urllib.parse import urlparse

from retrain.config.errors import ConfigIssue
from retrain.config.schema import TrainConfig
from retrain.registry import builtin
from retrain.validation.built import NOT_BUILT_TEXT
from retrain.validation.mode import check_selector

#: keys that only a provider reads
PROVIDER_KEYS = ("id", "args", "max_turns", "max_episode_tokens", "rollout_env_workers", "rollout_buffer_size")


def check_environment(c: TrainConfig) -> list[ConfigIssue]:
    issues = _provider(c) if c.environment.provider else _without_provider(c)
    if c.echo.enabled and c.environment.provider != "openenv":
        issues.append(ConfigIssue("ECHO trains on the observation tokens of multi-turn episodes, which only "
                                  "the OpenEnv provider produces in this version", key="[echo] enabled",
                                  hint='[environment] provider = "openenv"'))
    if c.training.tl_grpo and c.environment.provider != "openenv":
        issues.append(ConfigIssue("TL-GRPO scores alternative actions by replaying an episode in a fresh session, "
                                  "which only an OpenEnv environment allows (reset with the episode's seed)",
                                  key="[training] tl_grpo", hint='[environment] provider = "openenv"'))
    return issues


def _provider(c: TrainConfig) -> list[ConfigIssue]:
    env = c.environment
    issues: list[ConfigIssue] = []
    if problem := check_selector(env.provider, builtin.ENVIRONMENT_PROVIDERS, builtin.ENTRY_POINT_GROUPS["environment"],
                                 "[environment] provider", "environment provider"):
        issues.append(problem)
    if not env.id:
        issues.append(ConfigIssue("required when [environment] provider is set", key="[environment] id"))
    elif env.provider == "openenv" and urlparse(env.id).scheme not in ("http", "https", "ws", "wss"):
        issues.append(ConfigIssue(f"{env.id!r} must be an http(s):// or ws(s):// URL for openenv",
                                  key="[environment] id"))
    if env.provider != "verifiers" and env.max_episode_tokens:
        issues.append(ConfigIssue("caps the tokens of a verifiers multi-turn episode; the OpenEnv provider's "
                                  "limit is args.context_window", key="[environment] max_episode_tokens",
                                  hint="args = {context_window = N}" if env.provider == "openenv" else "remove it"))
    if env.provider == "verifiers" and env.rollout_buffer_size != 0:
        issues.append(ConfigIssue(f"{NOT_BUILT_TEXT}: a rollout buffer for verifiers environments (episodes "
                                  "in flight are bounded by rollout_env_workers)",
                                  key="[environment] rollout_buffer_size", hint="remove it"))
    return issues


def _without_provider(c: TrainConfig) -> list[ConfigIssue]:
    env = c.environment
    default = type(env)()
    return [ConfigIssue("has no effect without [environment] provider", key=f"[environment] {key}",
                        hint='provider = "verifiers" or "openenv", or remove it')
            for key in PROVIDER_KEYS if getattr(env, key) != getattr(default, key)]
