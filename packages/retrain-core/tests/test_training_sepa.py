"""The SEPA controller (spec algorithms.md §8) and its checkpoint state."""

import json

import msgspec
import pytest

from retrain.training.sepa import SepaController
from retrain.training.state import SepaState


def test_linear_gate_worked_example():
    c = SepaController(100, "linear", 10, 0.1)
    assert all(c.resolve_lambda(s) == 0.0 for s in (0, 11, 60, 200))
    c.observe_correct_rate(0.05)
    assert not c.gate_open
    c.observe_correct_rate(0.1)
    assert c.gate_open
    c.observe_correct_rate(0.0)
    assert c.gate_open
    assert [c.resolve_lambda(s) for s in (0, 10, 11, 60, 110, 200)] == pytest.approx(
        [0, 0, 0.01, 0.5, 1, 1]
    )


def test_auto_worked_example():
    c = SepaController(0, "auto", 0, 0.0, ema_decay=0.5, var_threshold=0.5, warmup=2)
    assert c.gate_open and c.enabled()
    c.update_auto_state([1, 3])
    assert (c.var_ema, c.var_0, c.resolve_lambda(0)) == (1.0, None, 0.0)
    c.update_auto_state([2, 2])
    assert (c.var_ema, c.var_0, c.resolve_lambda(0)) == (0.5, 0.5, 0.0)
    c.update_auto_state([2, 2])
    assert (c.var_ema, c.resolve_lambda(0)) == (0.25, 0.0)
    c.update_auto_state([2, 2])
    assert (c.var_ema, c.resolve_lambda(0)) == (0.125, 0.5)


def test_auto_drops_bad_values_and_linear_ignores_updates():
    c = SepaController(0, "auto", 0, 0.0, warmup=1)
    c.update_auto_state([float("nan"), -1.0, float("inf")])
    assert c.var_ema is None
    linear = SepaController()
    linear.observe_completions([[-1.0, -3.0]])
    assert linear.var_ema is None


def test_observe_completions_uses_execution_tokens():
    c = SepaController(0, "auto", 0, 0.0, warmup=1)
    c.observe_completions([[-1.0, -9.0, -3.0]], [[0, 1, 0]])
    assert c.var_ema == pytest.approx(1.0)


def test_state_round_trip_is_exact_and_json():
    a = SepaController(0, "auto", 0, 0.2, ema_decay=0.9, warmup=3)
    for v in ([1, 2, 4], [0.5, 3.0], [2, 2.5], [1, 7]):
        a.update_auto_state(v)
    a.observe_correct_rate(0.3)
    state = json.loads(json.dumps(msgspec.to_builtins(a.state())))
    assert set(state) >= {"sepa_steps", "var_ema", "var_0", "warmup_seen", "gate_open"}  # the reference's keys
    b = SepaController(0, "auto", 0, 0.2, ema_decay=0.9, warmup=3)
    assert b.load_state(msgspec.convert(state, SepaState)) == []
    for v in ([3, 1], [0.1, 0.2]):
        a.update_auto_state(v)
        b.update_auto_state(v)
    assert a.state() == b.state()
    assert a.resolve_lambda(9) == b.resolve_lambda(9)


def test_state_validation_and_config_notes():
    c = SepaController()
    state = msgspec.to_builtins(c.state())
    with pytest.raises(ValueError, match="gate_open"):
        msgspec.convert({**state, "gate_open": "yes"}, SepaState)
    with pytest.raises(ValueError, match="warmup_seen"):
        msgspec.convert({**state, "warmup_seen": -1}, SepaState)
    with pytest.raises(ValueError, match="finite"):
        msgspec.convert({**state, "var_ema": float("nan")}, SepaState)
    notes = SepaController(steps=100).load_state(msgspec.convert(state, SepaState))
    assert notes and "sepa_steps" in notes[0]


def test_bad_schedule():
    with pytest.raises(ValueError, match="schedule"):
        SepaController(schedule="cosine")
