"""`[environment]` for the OpenEnv provider: the server URL (`id`) and `args`, checked before
any model loads. An unknown `args` key is refused by name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.environments.openenv.render import Renderer, default_renderer
from retrain.errors import UserError

#: args key -> (type, default, what it sets)
ARGS: dict[str, tuple[type, Any, str]] = {
    "num_examples": (int, 100, "episodes seeds: this many prompts, seeds seed .. seed + num_examples - 1"),
    "seed": (int, 0, "the first reset seed"),
    "renderer": (str, "", "a dotted path to a callable (observation, **context) -> str"),
    "connect_timeout_s": (float, 10.0, "seconds to connect (and for /health and /schema)"),
    "message_timeout_s": (float, 300.0, "seconds to wait for each reply of the server"),
    "retries": (int, 2, "reconnects of an episode whose connection drops or times out"),
    "retry_backoff_s": (float, 0.5, "the first retry's wait; each further retry doubles it"),
    "send_token_limited_actions": (bool, False, "send an action cut by max_tokens as it is instead of ending the "
                                   "episode (truncated, reward 0)"),
    "context_window": (int, 0, "an episode ends (truncated) when its next prompt + max_tokens exceeds this; 0: no limit"),
}
NOT_BUILT_ARGS = {
    "expected_task_source": "the task provenance guard",
    "expected_task_ids": "the task provenance guard",
}


@dataclass(frozen=True)
class OpenEnvSettings:
    base: str
    num_examples: int
    seed: int
    renderer: Renderer
    connect_timeout_s: float
    message_timeout_s: float
    retries: int
    retry_backoff_s: float
    context_window: int
    send_token_limited_actions: bool
    max_turns: int  # [environment] max_turns; -1: the server decides
    workers: int
    buffer: int  # episodes in flight at once; 0: one group
    require_bridge: bool  # [echo] require_live_observation_bridge


def _value(key: str, raw: Any) -> Any:
    kind, _, _ = ARGS[key]
    number = kind is float and isinstance(raw, int)
    ok = (isinstance(raw, kind) or number) and (kind is bool) == isinstance(raw, bool)
    if not ok:
        raise UserError(f"[environment] args.{key} = {raw!r}: expected {kind.__name__}")
    if kind in (int, float) and raw < 0:  # every number here is a count, a seed or a time
        raise UserError(f"[environment] args.{key} = {raw!r}: must be >= 0")
    return kind(raw)


def parse(config: TrainConfig) -> OpenEnvSettings:
    env = config.environment
    args: Mapping[str, Any] = env.args or {}
    for key in args:
        if key in NOT_BUILT_ARGS:
            raise UserError(f"[environment] args.{key}: {NOT_BUILT_ARGS[key]} is not built yet in this version",
                            hint="remove it")
        if key not in ARGS:
            raise UserError(f"[environment] args.{key}: not an OpenEnv argument",
                            hint="known: " + ", ".join(sorted(ARGS)))
    v = {k: _value(k, args[k]) if k in args else default for k, (_, default, _) in ARGS.items()}
    if v["num_examples"] < 1:
        raise UserError("[environment] args.num_examples must be >= 1")
    renderer: Renderer = default_renderer
    if v["renderer"]:
        from retrain.plugins.resolve import resolve

        try:
            renderer = resolve(v["renderer"], config.plugins.search_paths)[0]
        except Exception as e:
            raise UserError(f"[environment] args.renderer = {v['renderer']!r} does not load ({e})") from None
        if not callable(renderer):
            raise UserError(f"[environment] args.renderer = {v['renderer']!r} is not callable")
    return OpenEnvSettings(base=env.id.rstrip("/"), num_examples=v["num_examples"], seed=v["seed"],
                           renderer=renderer, connect_timeout_s=v["connect_timeout_s"],
                           message_timeout_s=v["message_timeout_s"], retries=v["retries"],
                           retry_backoff_s=v["retry_backoff_s"], context_window=v["context_window"],
                           send_token_limited_actions=v["send_token_limited_actions"],
                           max_turns=env.max_turns, workers=env.rollout_env_workers, buffer=env.rollout_buffer_size,
                           require_bridge=config.echo.enabled and config.echo.require_live_observation_bridge)
