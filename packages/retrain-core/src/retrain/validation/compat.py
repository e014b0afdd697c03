"""A run's algorithm against its backend's declared capabilities, and algorithm settings that
do nothing in this flow. Each step adds its issues to the flow, in the order of `_STEPS`."""

from __future__ import annotations

from collections.abc import Callable

from retrain.advantages.transform import mask_rho
from retrain.validation.backend import backends_with, listed
from retrain.validation.environment import capabilities_of, providers_with
from retrain.validation.preflight import Preflight


def check_compat(flow: Preflight) -> None:
    """The steps that ask the backend's capabilities are skipped for a backend not installed
    here: its capabilities are a placeholder's, and the dep warning already says it cannot run
    here (`retrain explain` on a machine that only writes configs)."""
    for step in _STEPS:
        if flow.capabilities_known or step not in _ASK_THE_BACKEND:
            step(flow)


def _token_advantages(flow: Preflight) -> None:
    p = flow.pipeline
    if p is not None and p.token_varying and not flow.capabilities.preserves_token_advantages:
        flow.add("error", "compat",
                 f"{p.condition} gives each token its own advantage, but backend {flow.backend!r} keeps "
                 "one advantage per completion (preserves_token_advantages = false); use "
                 'transform_mode = "none" (or algorithm_mode grpo_none / maxrl_none / reinforce_pp_none) '
                 f"or a token-preserving backend such as {listed(backends_with('preserves_token_advantages'))}")


def _echo_backends() -> str:
    return listed(backends_with(lambda k: k.preserves_token_advantages and k.supports_echo_shared_forward))


def _echo(flow: Preflight) -> None:
    c, caps = flow.config, flow.capabilities
    if not c.echo.enabled:
        return
    if not caps.preserves_token_advantages:
        flow.add("error", "compat", f"[echo] needs a backend with token advantages and a shared forward pass; "
                 f"{flow.backend!r} has neither (use {_echo_backends()})")
    elif not caps.supports_echo_shared_forward:
        flow.add("error", "compat",
                 f"[echo] needs a shared forward pass; backend {flow.backend!r} lacks it (use {_echo_backends()})")
    if not capabilities_of(c.environment.provider).multi_turn:
        multi_turn = "/".join(d.name for d in providers_with("multi_turn")) or "multi-turn"
        flow.add("warning", "config", f"[echo] is enabled but no {multi_turn} environment "
                 "provides observation tokens; it will train nothing")


def _sepa_controller(flow: Preflight) -> None:
    c, p = flow.config, flow.pipeline
    if (p is not None and p.uses_sepa_controller and c.sepa.schedule == "linear" and c.sepa.steps <= 0
            and "delight_lambda" not in p.params):
        flow.add("warning", "config", f"{p.condition} uses the SEPA controller but [sepa] steps = "
                 f"{c.sepa.steps} with the linear schedule keeps lambda at 0 (no pooling)")


def _sync_loss(flow: Preflight) -> None:
    if not flow.capabilities.reports_sync_loss:
        flow.add("warning", "config", f"backend {flow.backend!r} reports a placeholder loss")


def _entropy_mask(flow: Preflight) -> None:
    p = flow.pipeline
    if p is not None and p.transform is not None and p.transform.name == "entropy_mask" and mask_rho(p.params) <= 0:
        flow.add("warning", "config", "entropy_mask with surprisal_mask_rho = 0 masks nothing "
                 "(plain GTPO); set e.g. surprisal_mask_rho = 0.2 to keep the top 20% of tokens")


_STEPS: tuple[Callable[[Preflight], None], ...] = (
    _token_advantages, _echo, _sepa_controller, _sync_loss, _entropy_mask,
)
_ASK_THE_BACKEND = frozenset({_token_advantages, _echo, _sync_loss})
