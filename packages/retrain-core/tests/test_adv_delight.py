"""The Delight family (spec algorithms.md §5): normalisation, gates, eta, hard top-K, metrics."""

import math
from typing import Any

import numpy as np
import pytest

from retrain.advantages.delight.gate import hard_keep, sigmoid
from retrain.advantages.delight.scale import normalize
from retrain.advantages.delight.transform import DelightParams, delight, parse_params
from retrain.advantages.pipeline import build_pipeline
from retrain.advantages.ragged import Ragged
from retrain.config.schema import SECTIONS, TrainConfig


def make_config(**sections: dict[str, Any]) -> TrainConfig:
    return TrainConfig(**{name: SECTIONS[name](**values) for name, values in sections.items()})


def pipe(transform, **params):
    return build_pipeline(
        make_config(
            algorithm={
                "advantage_mode": "grpo",
                "transform_mode": transform,
                "transform_params": params,
            }
        )
    )


def lp_of(s):
    """Logprobs whose surprisals are s."""
    return [[-x for x in row] for row in s]


def rows(result):
    return [r.tolist() for r in result.completions()]


def close_rows(actual, expected, tol=1e-6):
    for a, e in zip(actual, expected, strict=True):
        assert a == pytest.approx(e, abs=tol)


def norm1(values, mode):
    layout, s = Ragged.of([values])
    return normalize(layout, s, mode).tolist()


def test_normalisation_worked_examples():
    assert norm1([0.1, 0.3, 2.0], "scale") == pytest.approx(
        [0.117309, 0.351928, 2.346186], abs=1e-6
    )
    assert norm1([0.1, 0.3, 2.0], "mad_scale") == pytest.approx(
        [0.337245, 1.011736, 6.744908], abs=1e-6
    )
    assert norm1([0.5, 0.5, 0.5, 2], "mad_scale") == pytest.approx(
        [0.7698, 0.7698, 0.7698, 3.079201], abs=1e-6
    )


def test_normalisation_edges():
    assert norm1([3.0], "scale") == [3.0]
    assert norm1([2.0, 2.0], "scale") == [2.0, 2.0]
    assert norm1([1.0, 3.0], "none") == [1.0, 3.0]
    layout, s = Ragged.of([[1.0, 3.0], [], [2.0, 2.0, 5.0]])
    out = normalize(layout, s, "scale")
    assert out[:2].tolist() == pytest.approx([1.0, 3.0])  # std 1
    assert out[2:].tolist() == pytest.approx((np.array([2, 2, 5]) / np.std([2, 2, 5])).tolist())


def test_sigmoid_saturates():
    assert sigmoid(np.array([25.0, -25.0, 0.0])).tolist() == [1.0, 0.0, 0.5]


def _delight1(a, s, p):
    layout, s_flat = Ragged.of([s])
    tok, _ = delight(layout, np.array([a], float), -s_flat, p, sepa_lambda=None, eta_prev=None)
    return tok.tolist()


def test_delight_gate_worked_examples():
    assert _delight1(1, [0.1, 2], DelightParams()) == pytest.approx([0.524979, 0.880797], abs=1e-6)
    assert _delight1(-1, [0.1, 2], DelightParams()) == pytest.approx(
        [-0.475021, -0.119203], abs=1e-6
    )
    assert _delight1(1, [0.1, 0.3, 2.0], DelightParams(norm="scale")) == pytest.approx(
        [0.529294, 0.587085, 0.912631], abs=1e-6
    )
    assert _delight1(0, [0.1, 2], DelightParams()) == [0.0, 0.0]
    assert _delight1(1, [], DelightParams()) == []


def test_delight_sepa_worked_example():
    layout, s = Ragged.of([[0.1, 2]])
    tok, metrics = delight(
        layout, np.array([1.0]), -s, DelightParams(), sepa_lambda=0.5, eta_prev=None
    )
    assert tok.tolist() == pytest.approx([0.762490, 0.940399], abs=1e-6)
    assert metrics["dg_lambda"] == 0.5
    tok0, _ = delight(layout, np.array([1.0]), -s, DelightParams(), sepa_lambda=0.0, eta_prev=None)
    assert tok0.tolist() == [1.0, 1.0]


def keep1(a, s, k):
    layout, flat = Ragged.of([s])
    return hard_keep(layout, np.array([a], float), flat, k).tolist()


def test_hard_delight_worked_examples():
    s = [0.1, 2, 0.5, 3, 0.2]
    assert keep1(1, s, 0.4) == [0, 1, 0, 1, 0]
    assert keep1(-1, s, 0.4) == [1, 0, 0, 0, 1]
    assert keep1(1, [1, 1, 1, 1], 0.5) == [1, 1, 0, 0]
    assert keep1(-1, [1, 1, 1, 1], 0.5) == [1, 1, 0, 0]
    p = pipe("hard_delight", delight_k_frac=0.4)
    result = p.compute_group([1.0], [[-x for x in s]], sepa_lambda=0.5)
    assert rows(result) == [[0.0] * 5]  # one completion: grpo advantage 0
    layout, flat = Ragged.of([s])
    from retrain.advantages.delight.transform import hard_delight

    tok, _ = hard_delight(
        layout, np.array([-1.0]), -flat, DelightParams(k_frac=0.4), sepa_lambda=1.0
    )
    assert tok.tolist() == [-1, 0, 0, 0, -1]
    tok, _ = hard_delight(
        layout, np.array([1.0]), -flat, DelightParams(k_frac=0.4), sepa_lambda=0.5
    )
    assert tok.tolist() == [0.5, 1, 0.5, 1, 0.5]


def test_hard_delight_through_the_pipeline():
    result = pipe("hard_delight", delight_k_frac=0.4).compute_group(
        [1, 0], lp_of([[0.1, 2, 0.5, 3, 0.2], [0.5, 1.5]]), sepa_lambda=1.0
    )
    close_rows(rows(result), [[0, 0.5, 0, 0.5, 0], [-0.5, 0]])
    assert result.metrics["hard_dg_active_frac"] == pytest.approx(3 / 7)
    assert result.metrics["hard_dg_net_bias"] == pytest.approx(-1.0)
    assert result.metrics["hard_dg_k_frac"] == 0.4 and result.metrics["hard_dg_lambda"] == 1.0


S = [[0.1, 2.0], [0.5, 1.5]]


def test_adaptive_eta_worked_example():
    result = pipe("delight", delight_eta_mode="adaptive").compute_group([1, 0], lp_of(S))
    assert result.metrics["dg_eta"] == pytest.approx(1.233152, abs=1e-6)
    assert result.metrics["dg_eta_adaptive"] == 1.0
    close_rows(rows(result), [[0.255068, 0.346154], [-0.224745, -0.176235]])


def test_adaptive_eta_ema_worked_example():
    p = pipe("delight", delight_eta_mode="adaptive", delight_eta_ema_decay=0.8)
    result = p.compute_group([1, 0], lp_of(S), delight_eta_prev=1.0)
    assert result.metrics["dg_eta"] == pytest.approx(1.046630, abs=1e-6)
    # the previous eta may also come from the params table (legacy)
    q = pipe("delight", delight_eta_adaptive=True, delight_eta_ema_decay=0.8, delight_eta_prev=1.0)
    assert q.compute_group([1, 0], lp_of(S)).metrics["dg_eta"] == pytest.approx(1.046630, abs=1e-6)


def test_adaptive_eta_ordering_gap_worked_example():
    result = pipe(
        "delight", delight_eta_mode="adaptive", delight_eta_target_ordering_gap=0.5
    ).compute_group([1, 0], lp_of(S))
    assert result.metrics["dg_eta"] == pytest.approx(0.344286, abs=1e-6)
    close_rows(rows(result), [[0.268122, 0.474036], [-0.163021, -0.050852]])


def test_fixed_eta_and_delight_sepa_worked_examples():
    fixed = pipe("delight").compute_group([1, 0], lp_of(S))
    close_rows(rows(fixed), [[0.256249, 0.365529], [-0.218912, -0.160411]])
    assert fixed.metrics["dg_eta"] == 1.0 and fixed.metrics["dg_eta_adaptive"] == 0.0
    sepa = pipe("delight_sepa").compute_group([1, 0], lp_of(S), sepa_lambda=0.5)
    close_rows(rows(sepa), [[0.378289, 0.435320], [-0.344385, -0.295606]])
    override = pipe("delight_sepa", delight_lambda=0.5).compute_group(
        [1, 0], lp_of(S), sepa_lambda=0.0
    )
    close_rows(rows(override), rows(sepa))


def test_delight_metrics():
    result = pipe("delight").compute_group([1, 0], lp_of(S))
    m = result.metrics
    gates = [0.512497, 0.731059, 0.437824, 0.320821]  # tok / A
    assert m["dg_gate_mean"] == pytest.approx(np.mean(gates), abs=1e-5)
    assert m["dg_gate_min"] == pytest.approx(min(gates), abs=1e-5)
    assert m["dg_gate_mean_pos"] == pytest.approx(np.mean(gates[:2]), abs=1e-5)
    assert m["dg_breakthrough_frac"] == 0.0 and m["dg_neutral_frac"] == 0.5
    gap_pos, gap_neg = gates[1] - gates[0], -(gates[3] - gates[2])
    assert m["dg_gate_ordering_gap"] == pytest.approx((gap_pos + gap_neg) / 2, abs=1e-5)
    tok = np.concatenate(result.completions())
    assert m["dg_net_advantage_bias"] == pytest.approx(tok.sum() - (0.5 * 2 - 0.5 * 2))
    assert m["dg_token_adv_std"] == pytest.approx(tok.std())


def test_uniform_group_metrics_are_absent_not_zero():
    m = pipe("delight", delight_eta_mode="adaptive").compute_group([1, 1], lp_of(S)).metrics
    assert "dg_gate_mean" not in m and m["dg_eta"] == 1.0


def test_param_parsing():
    p = parse_params(
        {"delight_normalize": True, "delight_eta_adaptive": "true"}, default_norm="none"
    )
    assert p.norm == "scale" and p.eta.adaptive
    assert parse_params({}, default_norm="scale").norm == "scale"
    with pytest.raises(ValueError, match="delight_norm_mode"):
        parse_params({"delight_norm_mode": "zscore"}, default_norm="none")
    with pytest.raises(ValueError, match="delight_k_frac"):
        parse_params({"delight_k_frac": 0}, default_norm="none")
    with pytest.raises(ValueError, match="number"):
        parse_params({"delight_eta": "fast"}, default_norm="none")
    assert math.isclose(parse_params({"delight_eta": "2"}, default_norm="none").eta.base, 2.0)


def test_tiny_eta_and_huge_advantage_stay_finite():
    p = pipe("delight", delight_eta=1e-9)
    result = p.compute_group([1e308, -1e308], [[0.0, -1.0], [-0.0, -2.0]])
    assert np.all(np.isfinite(result.tokens))
