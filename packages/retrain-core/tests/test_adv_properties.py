"""Properties of the advantage pipeline for any finite input (hypothesis).

- outputs are finite and have one value per sampled token;
- a uniform group (identical rewards) gets all-zero token advantages;
- GRPO episode advantages sum to zero per group;
- no built-in transform flips the sign of a completion's episode advantage;
- batch normalisation and the advantage cap keep zeros and stay finite.
"""

from typing import Any

import msgspec
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrain.advantages import credit
from retrain.advantages.episode import batch_normalize, grpo
from retrain.advantages.pipeline import build_pipeline
from retrain.advantages.ragged import Ragged
from retrain.config.schema import TrainConfig
from retrain.registry import builtin
from retrain.training.signals import apply_advantage_cap

SETTINGS = settings(
    max_examples=int(__import__("os").environ.get("RETRAIN_HYPOTHESIS_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

finite = st.floats(allow_nan=False, allow_infinity=False)
rewards_st = st.one_of(finite, st.sampled_from([0.0, 1.0, 0.5]))
logprob_st = st.one_of(
    st.floats(min_value=-1e308, max_value=0.0, allow_nan=False),
    st.just(-0.0),
    st.floats(min_value=-60.0, max_value=0.0),
)


@st.composite
def groups(
    draw: Any, max_g: int = 6, max_len: int = 8
) -> tuple[list[float], list[list[float]], list[list[int]]]:
    g = draw(st.integers(1, max_g))
    rewards = draw(st.lists(rewards_st, min_size=g, max_size=g))
    lps = [draw(st.lists(logprob_st, max_size=max_len)) for _ in range(g)]
    masks = [draw(st.lists(st.integers(0, 1), min_size=len(lp), max_size=len(lp))) for lp in lps]
    return rewards, lps, masks


PIPELINES: dict[str, Any] = {}


def pipeline(adv: str, transform: str, beta: float = 0.1, alpha: float = 0.2, **params: Any) -> Any:
    key = repr((adv, transform, beta, alpha, sorted(params.items())))
    if key not in PIPELINES:
        c = TrainConfig()
        a = msgspec.structs.replace(
            c.algorithm,
            advantage_mode=adv,
            transform_mode=transform,
            transform_params=params,
            surprisal_mask_rho=0.3,
        )
        c = msgspec.structs.replace(
            c,
            algorithm=a,
            gtpo=msgspec.structs.replace(c.gtpo, beta=beta),
            hicra=msgspec.structs.replace(c.hicra, alpha=alpha),
        )
        PIPELINES[key] = build_pipeline(c)
    return PIPELINES[key]


COMBOS = [(a, t) for a in builtin.ADVANTAGE_MODES for t in builtin.TRANSFORM_MODES]


def check_result(result: Any, lps: list[list[float]]) -> list[np.ndarray]:
    rows = result.completions()
    assert [len(r) for r in rows] == [len(lp) for lp in lps]
    assert np.all(np.isfinite(result.tokens)) and np.all(np.isfinite(result.episode))
    assert all(np.isfinite(v) for v in result.metrics.values())
    return rows


@SETTINGS
@given(
    groups(),
    st.sampled_from(COMBOS),
    st.floats(-1.0, 2.0),
    st.floats(0.0, 50.0),
    st.floats(0.0, 1.0),
)
def test_any_finite_group(
    group: Any, combo: tuple[str, str], lam: float, beta: float, alpha: float
) -> None:
    rewards, lps, masks = group
    p = pipeline(*combo, beta=round(beta, 1), alpha=round(alpha, 1))
    result = p.compute_group(rewards, lps, planning_masks=masks, sepa_lambda=lam, step=3)
    rows = check_result(result, lps)
    for a, row in zip(result.episode, rows, strict=True):
        signs = np.sign(row)
        assert np.all((signs == 0) | (signs == np.sign(a))), (a, row)


@SETTINGS
@given(groups(), st.sampled_from([*COMBOS, ("discover_entropic", "none")]), rewards_st)
def test_uniform_group_gets_zero_advantages(
    group: Any, combo: tuple[str, str], value: float
) -> None:
    _, lps, masks = group
    rewards = [value] * len(lps)
    if combo[0] == "discover_entropic":
        c = TrainConfig(
            algorithm=msgspec.structs.replace(
                TrainConfig().algorithm, algorithm_mode="discover_entropic"
            )
        )
        p = build_pipeline(c)
    else:
        p = pipeline(*combo)
    result = p.compute_group(rewards, lps, planning_masks=masks, sepa_lambda=0.7)
    check_result(result, lps)
    assert not np.any(result.tokens) and not np.any(result.episode)


@SETTINGS
@given(st.lists(finite, min_size=1, max_size=12))
def test_grpo_sums_to_zero(rewards: list[float]) -> None:
    a = grpo(rewards)
    assert np.all(np.isfinite(a))
    scale = max(max(abs(r) for r in rewards), 1e-300)
    if scale < 1e307:  # beyond that the true differences are not representable
        assert abs(float(np.sum(a / scale))) <= 1e-12 * len(rewards)


@SETTINGS
@given(groups(max_g=4), st.sampled_from(["delight", "delight_sepa"]), st.floats(0.05, 5.0))
def test_adaptive_eta_is_finite(group: Any, transform: str, target: float) -> None:
    rewards, lps, masks = group
    p = pipeline(
        "grpo",
        transform,
        delight_eta_mode="adaptive",
        delight_norm_mode="mad_scale",
        delight_eta_target_ordering_gap=round(target, 2),
        delight_eta_ema_decay=0.5,
    )
    result = p.compute_group(
        rewards, lps, planning_masks=masks, sepa_lambda=0.5, delight_eta_prev=1.0
    )
    check_result(result, lps)
    assert 0.05 <= result.metrics["dg_eta"] <= 5.0


@SETTINGS
@given(st.lists(st.lists(finite, max_size=6), max_size=5), st.floats(0.0, 1e6))
def test_batch_norm_and_cap_keep_zeros(rows: list[list[float]], cap: float) -> None:
    arrays = [np.asarray(r, dtype=float) for r in rows]
    normed, metrics = batch_normalize(arrays)
    capped, _ = apply_advantage_cap(normed, cap)
    for before, after_norm, after_cap in zip(arrays, normed, capped, strict=True):
        assert np.all(np.isfinite(after_norm)) and np.all(np.isfinite(after_cap))
        assert np.all(after_norm[before == 0] == 0) and np.all(after_cap[before == 0] == 0)
        if cap > 0:
            assert np.all(np.abs(after_cap) <= cap)
    assert all(np.isfinite(v) for v in metrics.values())


@SETTINGS
@given(st.lists(st.lists(st.floats(0.0, 50.0), max_size=7), min_size=1, max_size=5), st.data())
def test_ragged_reductions_match_rows(rows: list[list[float]], data: Any) -> None:
    layout, flat = Ragged.of(rows)
    sums = layout.sum(flat)
    for i, row in enumerate(rows):
        assert np.isclose(sums[i], sum(row), atol=1e-9)
        if row:
            assert np.isclose(layout.median(flat)[i], np.median(row))
            assert np.isclose(layout.std(flat)[i], np.std(row), atol=1e-9)
    mask = np.asarray(
        data.draw(st.lists(st.integers(0, 1), min_size=len(flat), max_size=len(flat))), float
    )
    pooled = credit.sepa_pool(layout, flat, mask, 0.6)
    ex = mask == 0
    for i, (lo, hi) in enumerate(zip(layout.offsets[:-1], layout.offsets[1:], strict=True)):
        sel = ex[lo:hi]
        if sel.any():
            assert np.isclose(pooled[lo:hi][sel].mean(), flat[lo:hi][sel].mean(), atol=1e-9), i
        assert np.all(pooled[lo:hi][~sel] == flat[lo:hi][~sel])


@SETTINGS
@given(
    st.lists(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), max_size=9), min_size=1, max_size=5),
    st.data(),
)
def test_top_k_matches_a_stable_sort(rows: list[list[float]], data: Any) -> None:
    layout, flat = Ragged.of(rows)
    k = np.asarray([data.draw(st.integers(0, len(r) + 1)) for r in rows], dtype=np.int64)
    keep = layout.top_k_mask(flat, k)
    for i, row in enumerate(rows):
        lo = int(layout.offsets[i])
        chosen = sorted(range(len(row)), key=lambda j: (-row[j], j))[: int(k[i])]
        assert sorted(np.flatnonzero(keep[lo : lo + len(row)]).tolist()) == sorted(chosen)
