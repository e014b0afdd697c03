"""The composable pipeline (spec algorithms.md §4.2, §4.8, §6) and its plugin protocols."""

import math
import sys
from typing import Any

import numpy as np
import pytest

from retrain.advantages.algorithm import AlgorithmOutput
from retrain.advantages.episode import AdvantageOutput, AdvantageSpec
from retrain.advantages.pipeline import GroupInput, build_pipeline
from retrain.advantages.transform import TransformOutput, TransformSpec
from retrain.advantages.uncertainty import UncertaintySpec
from retrain.config.schema import SECTIONS, TrainConfig
from retrain.registry.core import register, unregister


def make_config(**sections: dict[str, Any]) -> TrainConfig:
    return TrainConfig(**{name: SECTIONS[name](**values) for name, values in sections.items()})


def pipe(adv="grpo", transform="none", beta=0.1, alpha=0.2, **algorithm):
    return build_pipeline(
        make_config(
            algorithm={"advantage_mode": adv, "transform_mode": transform, **algorithm},
            gtpo={"beta": beta},
            hicra={"alpha": alpha},
        )
    )


R = [1, 0]
LP = [[-0.2, -1.0, -2.0, -0.6], [-0.5, -1.5]]
M = [[0, 1, 0, 0], [0, 0]]


def rows(result):
    return [r.tolist() for r in result.completions()]


def close_rows(actual, expected, tol=1e-6):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a == pytest.approx(e, abs=tol)


@pytest.mark.parametrize(
    ("adv", "transform", "params", "expected"),
    [
        ("grpo", "none", {}, [[0.5, 0.5, 0.5, 0.5], [-0.5, -0.5]]),
        ("maxrl", "gtpo", {}, [[0.921051, 1.005261, 1.110524, 0.963156], [-0.949998, -1.049998]]),
        (
            "maxrl",
            "gtpo_hicra",
            {},
            [[0.921051, 1.206313, 1.110524, 0.963156], [-0.949998, -1.049998]],
        ),
        (
            "maxrl",
            "gtpo_sepa",
            {},
            [[0.959647, 1.005261, 1.054384, 0.980700], [-0.974998, -1.024998]],
        ),
        (
            "grpo",
            "gtpo_sepa_amp",
            {},
            [[0.441228, 0.502632, 0.583333, 0.472807], [-0.4625, -0.5375]],
        ),
        (
            "grpo",
            "entropy_mask",
            {"surprisal_mask_rho": 0.5},
            [[0, 0.502632, 0.555263, 0], [0, -0.525]],
        ),
    ],
)
def test_pipeline_worked_examples(adv, transform, params, expected):
    result = pipe(adv, transform, **params).compute_group(R, LP, planning_masks=M, sepa_lambda=0.5)
    close_rows(rows(result), expected)
    if transform == "entropy_mask":
        assert result.metrics["entropy_mask_threshold"] == 1.0
        assert result.metrics["entropy_mask_fraction"] == 0.5


def test_pipeline_stats_worked_example():
    result = pipe("maxrl", "gtpo_sepa").compute_group(R, LP, planning_masks=M, sepa_lambda=0.5)
    m = result.metrics
    assert m["exec_surprisal_mean"] == pytest.approx(0.96)
    assert m["exec_surprisal_var"] == pytest.approx(0.4584)
    assert m["plan_surprisal_mean"] == pytest.approx(1.0)
    assert m["plan_surprisal_var"] == pytest.approx(0.0)
    assert m["exec_entropy_mean"] == m["exec_surprisal_mean"]
    assert m["post_exec_surprisal_var"] == pytest.approx(0.1154, abs=1e-4)
    assert (
        result.stats is not None and result.stats.exec_.count == 5 and result.stats.plan.count == 1
    )


def test_predictive_variance_worked_example():
    result = pipe("grpo", "gtpo", beta=1.0, uncertainty_kind="pred_var").compute_group(R, LP)
    assert rows(result)[0] == pytest.approx([0.398102, 0.623784, 0.313897, 0.664217], abs=1e-6)


def test_shannon_entropy_worked_example():
    p = pipe("grpo", "gtpo", beta=1.0, uncertainty_kind="shannon_entropy")
    assert p.needs_entropies
    result = p.compute_group(R, LP, entropies=[[0.5, 0.5, 1, 2], [1, 1]])
    close_rows(rows(result), [[0.25, 0.25, 0.5, 1.0], [-0.5, -0.5]])
    with pytest.raises(ValueError, match="entropies"):
        p.compute_group(R, LP)


def test_uncertainty_override_in_transform_params():
    p = pipe("grpo", "gtpo", beta=1.0, transform_params={"uncertainty_kind": "predictive_variance"})
    assert p.uncertainty.name == "predictive_variance"


def test_needs_planning_masks_when_declared():
    p = pipe("maxrl", "gtpo_hicra")
    assert p.needs_planning and not p.uses_sepa_controller
    with pytest.raises(ValueError, match="planning masks"):
        p.compute_group(R, LP)
    assert not pipe("grpo", "gtpo").needs_planning


@pytest.mark.parametrize(
    ("mode", "adv", "transform"),
    [
        ("grpo_none", "grpo", "none"),
        ("maxrl_gtpo", "maxrl", "gtpo"),
        ("maxrl_gtpo_hicra", "maxrl", "gtpo_hicra"),
        ("maxrl_gtpo_sepa", "maxrl", "gtpo_sepa"),
        ("reinforce_pp_gtpo_sepa", "reinforce_pp", "gtpo_sepa"),
        ("reinforce_pp_delight", "reinforce_pp", "delight"),
        ("reinforce_pp_delight_sepa", "reinforce_pp", "delight_sepa"),
    ],
)
def test_algorithm_modes_are_their_recipes(mode, adv, transform):
    full = build_pipeline(make_config(algorithm={"algorithm_mode": mode}))
    parts = pipe(adv, transform)
    a = full.compute_group(R, LP, planning_masks=M, sepa_lambda=0.4)
    b = parts.compute_group(R, LP, planning_masks=M, sepa_lambda=0.4)
    close_rows(rows(a), rows(b), 1e-12)
    assert full.needs_planning == parts.needs_planning
    assert full.uses_sepa_controller == parts.uses_sepa_controller
    assert full.batch_normalize == (adv == "reinforce_pp")


def test_algorithm_mode_reads_nested_transform_params():
    p = build_pipeline(
        make_config(
            algorithm={
                "algorithm_mode": "reinforce_pp_delight",
                "params": {"transform_params": {"delight_eta": 2.0}},
            }
        )
    )
    assert p.params["delight_eta"] == 2.0


def test_token_varying_and_batch_norm_flags():
    assert not pipe("grpo", "none").token_varying
    assert pipe("grpo", "gtpo").token_varying and pipe("grpo", "delight").token_varying
    assert pipe("reinforce_pp", "none").batch_normalize
    flagged = build_pipeline(
        make_config(
            algorithm={"advantage_mode": "grpo", "transform_mode": "none"},
            training={"batch_advantage_norm": True},
        )
    )
    assert flagged.batch_normalize


def test_empty_and_single_completions():
    result = pipe("maxrl", "gtpo_sepa").compute_group(
        [1.0, 0.0, 1.0],
        [[-0.1, -2.0], [], [-0.5]],
        planning_masks=[[0, 1], [], [0]],
        sepa_lambda=0.5,
    )
    assert [len(r) for r in result.completions()] == [2, 0, 1]
    assert result.offsets.tolist() == [0, 2, 2, 3]


def test_compute_groups_merges_metrics():
    p = pipe("grpo", "gtpo")
    groups = [GroupInput([1, 0], LP), GroupInput([0, 1, 1], [[-0.3], [-0.2, -0.9], []])]
    results, merged = p.compute_groups(groups, sepa_lambda=0.0)
    assert len(results) == 2
    tokens = np.concatenate(
        [
            np.minimum(-np.concatenate([np.asarray(x) for x in lp]), 50)
            for lp in (LP, [[-0.3], [-0.2, -0.9], []])
        ]
    )
    assert merged["exec_surprisal_mean"] == pytest.approx(tokens.mean())
    assert merged["exec_surprisal_var"] == pytest.approx(tokens.var())


def test_input_validation():
    p = pipe("grpo", "gtpo")
    with pytest.raises(ValueError, match="completions"):
        p.compute_group([1, 0, 1], LP)
    with pytest.raises(ValueError, match="NaN"):
        p.compute_group(R, [[float("nan")], [-1.0]])
    with pytest.raises(ValueError, match="finite"):
        p.compute_group([1, float("inf")], LP)


def test_bad_params_fail_at_build_time():
    with pytest.raises(ValueError, match="delight_eta_ema_decay"):
        pipe("grpo", "delight", transform_params={"delight_eta_ema_decay": 1.0})
    with pytest.raises(ValueError, match="alpha"):
        pipe("grpo", "gtpo_hicra", alpha=1.5)


# ---------------------------------------------------------------- plugins


def _advantage_ctx(ctx):
    return AdvantageOutput([r * 2 + ctx.step for r in ctx.rewards], {"ctx_plugin": 1.0})


def _advantage_params(rewards, params):
    return [r - params["offset"] for r in rewards]


def _advantage_kwonly(rewards, *, params):
    return [r + len(params) * 0 for r in rewards]


def _advantage_plain(rewards):
    return [-r for r in rewards]


@pytest.mark.parametrize(
    ("obj", "params", "expected"),
    [
        (_advantage_ctx, {}, [2.0, 0.0]),
        (_advantage_params, {"offset": 0.5}, [0.5, -0.5]),
        (_advantage_kwonly, {}, [1.0, 0.0]),
        (_advantage_plain, {}, [-1.0, 0.0]),
        (AdvantageSpec("spec", _advantage_plain), {}, [-1.0, 0.0]),
        (lambda: _advantage_plain, {}, [-1.0, 0.0]),
    ],
)
def test_advantage_plugin_conventions(obj, params, expected):
    register("advantage_mode", "test_plugin", obj)
    try:
        p = pipe("test_plugin", "none", advantage_params=params)
        assert p.compute_group(R, [[-0.1], [-0.2]]).episode.tolist() == expected
    finally:
        unregister("advantage_mode", "test_plugin")


def test_advantage_plugin_output_is_validated():
    register("advantage_mode", "test_bad", lambda rewards: [1.0])
    try:
        with pytest.raises(ValueError, match="1 advantages for 2"):
            pipe("test_bad", "none").compute_group(R, [[-0.1], [-0.2]])
    finally:
        unregister("advantage_mode", "test_bad")


def test_transform_plugin_callable_and_spec():
    def halve(ctx):
        return TransformOutput(
            [[a / 2] * len(lp) for a, lp in zip(ctx.episode_advantages, ctx.logprobs, strict=True)],
            extra_metrics={"halved": 1.0},
        )

    halve.needs_planning = True
    register("transform_mode", "test_halve", halve)
    spec = TransformSpec(
        "test_pool",
        needs_planning=True,
        uses_sepa_controller=True,
        entropy_transform=lambda u, m, lam: [x * (1 - lam) for x in u],
    )
    register("transform_mode", "test_pool", spec)
    try:
        p = pipe("grpo", "test_halve")
        assert p.needs_planning
        result = p.compute_group(R, LP, planning_masks=M)
        close_rows(rows(result), [[0.25] * 4, [-0.25] * 2])
        assert result.metrics["halved"] == 1.0
        q = pipe("grpo", "test_pool")
        assert q.uses_sepa_controller
        # lambda = 1 scales every uncertainty to 0 -> uniform GTPO weights
        close_rows(
            rows(q.compute_group(R, LP, planning_masks=M, sepa_lambda=1.0)), [[0.5] * 4, [-0.5] * 2]
        )
    finally:
        unregister("transform_mode", "test_halve")
        unregister("transform_mode", "test_pool")


def test_transform_plugin_bad_shape():
    register("transform_mode", "test_short", lambda ctx: [[0.0]] * len(ctx.logprobs))
    try:
        with pytest.raises(ValueError, match="row 0"):
            pipe("grpo", "test_short").compute_group(R, LP)
    finally:
        unregister("transform_mode", "test_short")


def test_algorithm_plugin():
    def flat(ctx):
        return AlgorithmOutput(
            [[r] * len(lp) for r, lp in zip(ctx.rewards, ctx.logprobs, strict=True)]
        )

    register("algorithm_mode", "test_flat", flat)
    try:
        p = build_pipeline(make_config(algorithm={"algorithm_mode": "test_flat"}))
        result = p.compute_group(R, LP)
        assert rows(result) == [[1.0] * 4, [0.0] * 2]
        assert result.episode.tolist() == [1.0, 0.0]
    finally:
        unregister("algorithm_mode", "test_flat")


def test_dotted_path_plugins(tmp_path, monkeypatch):
    (tmp_path / "myplug.py").write_text(
        "from retrain.advantages.uncertainty import UncertaintySpec\n"
        "def adv(rewards):\n    return [r * 10 for r in rewards]\n"
        "def unc(ctx):\n    return [1.0 if i == 0 else 0.0 for i in range(len(ctx.logprobs))]\n"
        "UNC = UncertaintySpec('first', unc)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        p = pipe("myplug.adv", "gtpo", beta=1.0, uncertainty_kind="myplug.UNC")
        result = p.compute_group([1.0, 0.0], [[-1.0, -1.0], [-1.0]])
        assert result.episode.tolist() == [10.0, 0.0]
        assert rows(result)[0] == pytest.approx([20.0, 0.0], abs=1e-6)
    finally:
        sys.modules.pop("myplug", None)


def test_uncertainty_spec_object_is_accepted():
    assert UncertaintySpec("x", lambda ctx: []).name == "x"


def test_outputs_are_finite_for_extreme_inputs():
    p = pipe("maxrl", "gtpo_sepa", beta=50.0)
    big = 1e300
    result = p.compute_group(
        [big, -big, 1e-7],
        [[-1e9, 0.0, -np.inf], [], [-0.0]],
        planning_masks=[[0, 1, 0], [], [0]],
        sepa_lambda=1.0,
    )
    assert all(math.isfinite(v) for v in result.tokens.tolist())
