"""Back-pressure: the USL fit, regimes, recommendations and state (spec algorithms.md §10)."""

import json

import msgspec
import pytest

from retrain.training.backpressure import (
    NoopBackpressure,
    StepObservation,
    UslBackpressure,
    build_backpressure,
    usl_capacity,
    warmup_sizes,
)
from retrain.training.state import BackpressureState


def observe_usl(bp, ps, lam=100.0, sigma=0.1, kappa=0.01):
    for p in ps:
        bp.observe(StepObservation(p, 1, lam * usl_capacity(p, sigma, kappa), 1.0))


def test_worked_example_fit_and_ema():
    bp = UslBackpressure(warmup_steps=3)
    observe_usl(bp, [1, 2, 4])
    assert [round(x, 4) for _, x in bp.window] == [100.0, 178.5714, 281.6901]
    assert bp.sigma == pytest.approx(0.1) and bp.kappa == pytest.approx(0.01)
    assert bp.lam == pytest.approx(100.0) and bp.p_star == pytest.approx(9.486833, abs=1e-6)
    assert bp.ema == pytest.approx(125.240, abs=1e-3)
    assert bp.recommend().action == "hold" and bp.recommend().regime == "warmup"
    observe_usl(bp, [8])
    assert bp.ema == pytest.approx(148.1146, abs=1e-4)
    rec = bp.recommend()
    assert rec.utilization == pytest.approx(0.41433, abs=1e-5)
    # Decision (docs/advantages.md): the model rule compares the latest throughput, which
    # matches the fit exactly here; the reference's lagging EMA called this "retrograde".
    assert rec.regime == "optimal" and rec.action == "hold" and rec.batch_size == 8


def test_retrograde_past_the_peak_throttles():
    bp = UslBackpressure(warmup_steps=3, max_batch_size=64)
    observe_usl(bp, [1, 2, 4, 16])
    rec = bp.recommend()
    assert rec.regime == "retrograde" and rec.action == "throttle"
    assert rec.batch_size == int(9.486833 * 0.85)


def test_increase_well_below_the_peak():
    bp = UslBackpressure(warmup_steps=3)
    observe_usl(bp, [1, 2, 4, 2])
    rec = bp.recommend()
    assert rec.action == "increase" and rec.batch_size == 8


def test_before_any_fit():
    bp = UslBackpressure(warmup_steps=0)
    bp.observe(StepObservation(16, 1, 100, 1.0))
    rec = bp.recommend()
    assert rec.regime == "optimal"
    assert (
        rec.utilization == 0.0
    )  # decision: unknown until the first fit (reference: EMA / 1 = 100)


def test_roofline_uses_the_ridge_point():
    # ridge = 1000 GFLOP/s / 100 GB/s = 10 FLOP/byte; C(p) ~ p FLOP/byte before a fit
    low = UslBackpressure(warmup_steps=0, peak_gflops=1000, peak_bw_gb_s=100)
    low.observe(StepObservation(2, 1, 100, 1.0))
    assert low.regime == "memory_bound"
    high = UslBackpressure(warmup_steps=0, peak_gflops=1000, peak_bw_gb_s=100)
    high.observe(StepObservation(32, 1, 100, 1.0))
    assert high.regime == "compute_bound"


def test_skipped_steps_count_but_do_not_observe():
    bp = UslBackpressure(warmup_steps=0)
    bp.observe(StepObservation(4, 2, 0, 0.0, skipped=True))
    assert bp.step_count == 1 and bp.ema is None and (bp.last_batch, bp.last_group) == (4, 2)


def test_state_round_trip():
    a = UslBackpressure(warmup_steps=2)
    observe_usl(a, [1, 2, 4, 8])
    b = UslBackpressure(warmup_steps=2)
    saved = json.loads(json.dumps(msgspec.to_builtins(a.state())))
    assert saved["kind"] == "usl"
    b.load_state(msgspec.convert(saved, BackpressureState))
    observe_usl(a, [6])
    observe_usl(b, [6])
    assert a.recommend() == b.recommend() and a.state() == b.state()
    with pytest.raises(ValueError):
        b.load_state(msgspec.convert({"kind": "noop"}, BackpressureState))


def test_warmup_sweep_and_noop():
    assert warmup_sizes(1, 64) == [1, 2, 4, 8, 16, 32, 64]
    assert warmup_sizes(3, 20) == [3, 6, 12, 20]
    bp = UslBackpressure(warmup_steps=5, min_batch_size=3, max_batch_size=20)
    assert [bp.warmup_batch_size(i) for i in range(6)] == [3, 6, 12, 20, 3, None]
    noop = NoopBackpressure(8, 16)
    assert noop.recommend().action == "hold" and noop.recommend().batch_size == 8
    from retrain.config.schema import TrainConfig

    assert isinstance(build_backpressure(TrainConfig()), NoopBackpressure)
