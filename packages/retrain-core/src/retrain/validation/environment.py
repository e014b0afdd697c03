"""`[environment]`: the provider, its keys, and the features only some providers feed (ECHO,
TL-GRPO). Every rule asks the provider's declared `EnvironmentCapabilities`
(retrain.environments.protocol), never its name; a provider whose distribution is not
installed here is not judged (its record ships with it; dependency_warnings names it)."""

from __future__ import annotations

from retrain.config.errors import ConfigIssue
from retrain.config.schema import TrainConfig
from retrain.environments import catalog
from retrain.environments.protocol import EnvironmentCapabilities, EnvironmentDefinition
from retrain.io.http import check_url
from retrain.registry import builtin
from retrain.validation.built import NOT_BUILT_TEXT
from retrain.validation.mode import check_selector

#: keys that only a provider reads
PROVIDER_KEYS = ("id", "args", "max_turns", "max_episode_tokens", "rollout_env_workers", "rollout_buffer_size")
#: what a provider that declares nothing, or an unknown name, is judged by
NO_CAPABILITIES = EnvironmentCapabilities()


def definition_of(provider: str) -> EnvironmentDefinition | None:
    """The installed provider's definition; None for no provider, an unknown name, one whose
    distribution is missing, or one whose entry point does not load."""
    entry = catalog.lookup(provider) if provider else None
    return entry.definition if entry is not None else None


def capabilities_of(provider: str) -> EnvironmentCapabilities:
    definition = definition_of(provider)
    return definition.capabilities if definition is not None else NO_CAPABILITIES


def providers_with(flag: str) -> list[EnvironmentDefinition]:
    """Installed providers that declare `flag`, for messages that name them (built-ins first)."""
    names = [*builtin.ENVIRONMENT_PROVIDERS, *catalog.names()]
    found = [d for n in dict.fromkeys(names) if (d := definition_of(n)) is not None]
    return [d for d in found if getattr(d.capabilities, flag)]


def titled(definitions: list[EnvironmentDefinition]) -> str:
    return " or ".join(d.title or d.name for d in definitions) or "no installed"


def choose(definitions: list[EnvironmentDefinition]) -> str:
    """`[environment] provider = "a"` (or "b"), a hint naming them."""
    return "[environment] provider = " + (" or ".join(f'"{d.name}"' for d in definitions) or '"..."')


def _unjudged(provider: str) -> bool:
    """A built-in name whose distribution is not installed here: its facts are unknown."""
    return provider in builtin.ENVIRONMENT_PROVIDERS and definition_of(provider) is None


def check_environment(c: TrainConfig) -> list[ConfigIssue]:
    provider = c.environment.provider
    issues = _provider(c) if provider else _without_provider(c)
    if _unjudged(provider):
        return issues
    caps = capabilities_of(provider)
    if c.echo.enabled and not caps.observation_tokens:
        feeders = providers_with("observation_tokens")
        issues.append(ConfigIssue("ECHO trains on the observation tokens of multi-turn episodes, which only "
                                  f"the {titled(feeders)} provider produces in this version", key="[echo] enabled",
                                  hint=choose(feeders)))
    if c.training.tl_grpo and not caps.replays_episodes:
        replayers = providers_with("replays_episodes")
        title = titled(replayers)
        issues.append(ConfigIssue("TL-GRPO scores alternative actions by replaying an episode in a fresh session, "
                                  f"which only {'an' if title[:1].lower() in 'aeiou' else 'a'} {title} environment "
                                  "allows (reset with the episode's seed)",
                                  key="[training] tl_grpo", hint=choose(replayers)))
    return issues


def _provider(c: TrainConfig) -> list[ConfigIssue]:
    env = c.environment
    issues: list[ConfigIssue] = []
    if problem := check_selector(env.provider, builtin.ENVIRONMENT_PROVIDERS, builtin.ENTRY_POINT_GROUPS["environment"],
                                 "[environment] provider", "environment provider"):
        issues.append(problem)
    if _unjudged(env.provider):
        return issues + ([] if env.id else [ConfigIssue("required when [environment] provider is set",
                                                        key="[environment] id")])
    caps = capabilities_of(env.provider)
    if not env.id:
        issues.append(ConfigIssue("required when [environment] provider is set", key="[environment] id"))
    elif caps.id_schemes and (why := check_url(env.id, caps.id_schemes)):
        issues.append(ConfigIssue(f"{env.id!r} {why}", key="[environment] id",
                                  hint=f"{caps.id_form} for {env.provider}" if caps.id_form else ""))
    if not caps.episode_token_cap and env.max_episode_tokens:
        readers = " or ".join(d.title or d.name for d in providers_with("episode_token_cap")) or "multi-turn provider's"
        limit = f"; {caps.episode_limit}" if caps.episode_limit else ""
        issues.append(ConfigIssue(f"caps the tokens of a {readers} multi-turn episode{limit}",
                                  key="[environment] max_episode_tokens", hint=caps.episode_limit_hint))
    if not caps.rollout_buffer and env.rollout_buffer_size != 0:
        issues.append(ConfigIssue(f"{NOT_BUILT_TEXT}: a rollout buffer for {env.provider} environments (episodes "
                                  "in flight are bounded by rollout_env_workers)",
                                  key="[environment] rollout_buffer_size", hint="remove it"))
    return issues


def _without_provider(c: TrainConfig) -> list[ConfigIssue]:
    env = c.environment
    default = type(env)()
    names = " or ".join(f'"{n}"' for n in builtin.ENVIRONMENT_PROVIDERS)
    return [ConfigIssue("has no effect without [environment] provider", key=f"[environment] {key}",
                        hint=f"provider = {names}, or remove it")
            for key in PROVIDER_KEYS if getattr(env, key) != getattr(default, key)]
