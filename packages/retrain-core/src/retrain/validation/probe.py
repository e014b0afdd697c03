"""The probes: a run's advantage pipeline on fixed synthetic groups, before any GPU work.

A probe fails when the pipeline raises, or when it varies token advantages within a
completion on a backend that keeps one advantage per completion.
"""

from __future__ import annotations

from dataclasses import dataclass

from retrain.advantages.result import SCALAR_TOLERANCE
from retrain.validation.preflight import Preflight


@dataclass(frozen=True)
class ProbeCase:
    """A synthetic group; the edge case has an empty and a one-token completion."""

    name: str
    rewards: list[float]
    logprobs: list[list[float]]
    masks: list[list[int]]
    entropies: list[list[float]]
    sepa_lambda: float
    step: int


PROBE_CASES = (
    ProbeCase(
        "contrast",
        [1.0, 0.0],
        [[-0.3, -1.2, -2.5], [-0.8, -0.1, -1.7]],
        [[0, 1, 0], [1, 0, 0]],
        [[0.6, 1.1, 1.9], [0.9, 0.2, 1.4]],
        0.7,
        7,
    ),
    ProbeCase(
        "partial",
        [0.25, 0.75],
        [[-1.5, -0.05, -0.7], [-2.2, -0.4, -0.9]],
        [[0, 0, 1], [0, 1, 1]],
        [[1.3, 0.1, 0.8], [1.8, 0.6, 1.0]],
        0.35,
        29,
    ),
    ProbeCase(
        "ragged",
        [1.0, 0.0, 1.0],
        [[-0.2, -0.9], [], [-3.0]],
        [[1, 0], [], [0]],
        [[0.4, 0.9], [], [2.2]],
        0.5,
        0,
    ),
)


def run_probe(flow: Preflight, case: ProbeCase) -> bool:
    """True when the pipeline passes `case`; a failure is added to the flow's issues."""
    p = flow.pipeline
    assert p is not None
    try:
        result = p.compute_group(
            case.rewards,
            case.logprobs,
            planning_masks=case.masks,
            entropies=case.entropies,
            sepa_lambda=case.sepa_lambda,
            step=case.step,
        )
    except Exception as exc:
        flow.add("error", "probe", f"probe {case.name!r}: {type(exc).__name__}: {exc}")
        return False
    # A declared token-varying pipeline is already a compat error; this catches plugins that
    # declare one advantage per completion but vary anyway.
    if not flow.capabilities.preserves_token_advantages and not p.token_varying:
        spread = result.token_spread()
        if spread.size and float(spread.max()) > SCALAR_TOLERANCE:
            flow.add("error", "probe", f"probe {case.name!r}: token advantages vary within a completion (spread "
                     f"{float(spread.max()):.3g}) on backend {flow.backend!r}, which keeps one per completion")
            return False
    return True
