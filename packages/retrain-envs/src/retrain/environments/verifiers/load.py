"""Load an installed verifiers 0.4 taskset by id, before any model loads. A taskset without an
Env of its own is single-turn: retrain samples and scores offline, so every reward and metric
must be a pure function of the trace (no runtime, no judge). A taskset whose package exports a
`vf.Env` is multi-turn: the Env is built here (retrain.environments.verifiers.episodes plays it),
each seat that would run on Prime's remote sandboxes (verifiers' default) running locally in a
subprocess instead, `[environment] max_turns` (when > 0) capping every seat's turns and
`max_episode_tokens` (when > 0) its tokens (verifiers' `max_total_tokens`).

A taskset's id is its package's import name with `-` for `_` (verifiers resolves
`verifiers.v1.tasksets.<module>` first, then the top-level module); `[environment] args` are
the fields of its `TasksetConfig`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from retrain.errors import UserError


def _vf() -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError as e:
        raise UserError(f"the verifiers provider needs the verifiers package ({e})",
                        hint="pip install 'verifiers>=0.4'") from None
    return vf


def _needs_runtime(fn: Callable[..., Any]) -> bool:
    """verifiers skips (scores nothing for) a signal whose `runtime` has no default when
    scoring offline; retrain refuses it instead of training on a silent 0."""
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


def load_tasks(taskset_id: str, args: Mapping[str, Any], max_turns: int = -1,
               max_episode_tokens: int = 0) -> tuple[list[Any], Any | None]:
    """The taskset's tasks, in load order (each stamped with its `idx`), and its multi-turn
    `vf.Env` (None: single-turn)."""
    vf = _vf()
    from verifiers.v1.utils import loaders

    try:
        config_type = vf.taskset_config_type(taskset_id)
    except (ImportError, TypeError, AttributeError, ValueError) as e:
        raise UserError(f"[environment] id {taskset_id!r}: no installed verifiers taskset by that id ({e})",
                        hint="install the taskset's package (pip install <package>); its id is the "
                             "package's module name with '-' for '_'") from None
    try:
        config = config_type(id=taskset_id, **dict(args))
    except Exception as e:  # pydantic's ValidationError names the field
        fields = ", ".join(sorted(k for k in config_type.model_fields if k != "id"))
        raise UserError(f"[environment] args for taskset {taskset_id!r}: {_first_line(e)}",
                        hint=f"its fields: {fields or '(none)'}") from None
    env = None
    if loaders.environment_class(taskset_id) is not loaders.SingleAgentEnv:
        env = build_env(vf, taskset_id, args, max_turns, max_episode_tokens)
    taskset = env.taskset if env is not None else vf.load_taskset(config)
    if not taskset.bounded:
        raise UserError(f"[environment] id {taskset_id!r} yields tasks forever; retrain needs a bounded taskset",
                        hint="bound it with its own config fields in [environment] args")
    tasks = list(taskset)
    if not tasks:
        raise UserError(f"[environment] id {taskset_id!r}: the taskset yields no tasks")
    if env is None:
        for key, value, unset in (("max_turns", max_turns, -1), ("max_episode_tokens", max_episode_tokens, 0)):
            if value != unset:
                raise UserError(f"[environment] {key} = {value}: taskset {taskset_id!r} is single-turn (its package "
                                "exports no verifiers Env), so there is no episode to cap", hint="remove it")
        check_offline_scoring(taskset_id, tasks[0])
    return tasks, env


def build_env(vf: Any, taskset_id: str, args: Mapping[str, Any], max_turns: int, max_episode_tokens: int) -> Any:
    from verifiers.v1.configs.agent import agent_config_fields

    taskset = {"id": taskset_id, **dict(args)}
    seats: dict[str, dict[str, Any]] = {}
    for name, spec in agent_config_fields(vf.resolve_env_config({"taskset": taskset})).items():
        seat: dict[str, Any] = {}
        if spec.runtime.type == "prime":
            seat["runtime"] = {"type": "subprocess"}
        if max_turns > 0:
            seat["max_turns"] = max_turns
        if max_episode_tokens > 0:
            seat["max_total_tokens"] = max_episode_tokens
        if seat:
            seats[name] = seat
    try:
        return vf.load_environment(vf.resolve_env_config({"taskset": taskset, **seats}))
    except (TypeError, ValueError) as e:
        raise UserError(f"[environment] id {taskset_id!r}: its verifiers Env does not load ({_first_line(e)})") from None


def check_offline_scoring(taskset_id: str, task: Any) -> None:
    rewards, metrics = task.hooks("reward"), task.hooks("metric")
    bad = [fn.__name__ for fn in (*rewards, *metrics) if _needs_runtime(fn)]
    if bad:
        raise UserError(f"[environment] id {taskset_id!r}: {', '.join(bad)} need(s) a runtime (a sandbox) to "
                        "score, which retrain's offline scoring does not start",
                        hint="give the function's runtime parameter a default, or score from the trace alone")
    if task.config.judges:
        raise UserError(f"[environment] id {taskset_id!r}: its tasks are scored by an LLM judge, which retrain "
                        "does not run", hint="use @vf.reward functions of the trace")
    if not rewards:
        raise UserError(f"[environment] id {taskset_id!r}: its task type {type(task).__name__} has no "
                        "@vf.reward function to score completions with")


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    # pydantic: "1 validation error for X", then the field, then the message
    return ": ".join(lines[1:3]) if len(lines) >= 3 else (lines[0] if lines else type(e).__name__)
