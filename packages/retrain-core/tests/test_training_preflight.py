"""The preflight trace (`retrain trace`, spec config-cli.md §3.5)."""

from typing import Any

import pytest

from retrain.config.schema import SECTIONS, TrainConfig
from retrain.registry import builtin
from retrain.validation.trace import trace


def make_config(**sections: dict[str, Any]) -> TrainConfig:
    return TrainConfig(**{name: SECTIONS[name](**values) for name, values in sections.items()})


def errors(report):
    return [i for i in report.issues if i.severity == "error"]


@pytest.mark.parametrize("adv", builtin.ADVANTAGE_MODES)
@pytest.mark.parametrize("transform", builtin.TRANSFORM_MODES)
def test_every_combination_passes_on_local(adv, transform):
    report = trace(make_config(algorithm={"advantage_mode": adv, "transform_mode": transform}))
    assert report.ok, errors(report)
    assert report.probe_cases_run == report.probe_cases_passed == 3
    assert report.flow.capabilities.preserves_token_advantages


@pytest.mark.parametrize("mode", builtin.ALGORITHM_MODES)
def test_every_algorithm_mode_passes_on_local(mode):
    assert trace(make_config(algorithm={"algorithm_mode": mode})).ok


@pytest.mark.parametrize("transform", builtin.TRANSFORM_MODES)
def test_scalar_backend_rejects_token_varying_transforms(transform):
    report = trace(
        make_config(
            algorithm={"advantage_mode": "grpo", "transform_mode": transform},
            backend={"backend": "prime_rl"},
        )
    )
    if transform == "none":
        assert report.ok
    else:
        assert not report.ok
        (issue,) = [i for i in errors(report) if i.category == "compat"]
        assert "one advantage per completion" in issue.message


@pytest.mark.parametrize("mode", builtin.TOKEN_VARYING_ALGORITHMS)
def test_scalar_backend_rejects_token_varying_algorithms(mode):
    assert not trace(
        make_config(algorithm={"algorithm_mode": mode}, backend={"backend": "prime_rl"})
    ).ok


def test_json_shape():
    d = trace(TrainConfig()).to_dict()
    assert set(d) == {"ok", "probe_cases_run", "probe_cases_passed", "issues", "flow"}
    assert {
        "condition_label",
        "backend",
        "backend_capability_source",
        "needs_planning",
        "uses_sepa_controller",
        "preserves_token_advantages",
    } <= set(d["flow"])
    assert d["flow"]["condition_label"] == "maxrl+gtpo_sepa"


def test_echo_and_sepa_and_mask_warnings():
    report = trace(
        make_config(
            echo={"enabled": True}, sepa={"steps": 0}, algorithm={"transform_mode": "entropy_mask"}
        )
    )
    messages = " | ".join(i.message for i in report.issues)
    assert "no verifiers/openenv environment" in messages
    assert "surprisal_mask_rho = 0" in messages
    assert report.ok
    sepa = trace(make_config(sepa={"steps": 0}))
    assert any("keeps lambda at 0" in i.message for i in sepa.issues)
    tinker_echo = trace(make_config(echo={"enabled": True}, backend={"backend": "tinker"}))
    assert any(
        i.category == "compat" and "shared forward" in i.message for i in errors(tinker_echo)
    )


def test_bad_params_and_unknown_delight_keys():
    bad = trace(
        make_config(
            algorithm={
                "transform_mode": "delight",
                "transform_params": {"delight_eta_ema_decay": 2.0},
            }
        )
    )
    assert not bad.ok and bad.probe_cases_run == 0
    typo = trace(
        make_config(
            algorithm={"transform_mode": "delight", "transform_params": {"delight_eta_mod": 1}}
        )
    )
    assert not typo.ok and any("delight_eta_mod" in i.message for i in errors(typo))


def test_semantic_detector_without_its_package(monkeypatch):
    import retrain.validation.dependencies as dependencies

    monkeypatch.setattr(dependencies, "module_available", lambda name: False)
    report = trace(make_config(planning={"detector": "semantic"}))
    assert any(i.category == "dep" and "sentence-transformers" in i.message for i in errors(report))
    # Not needed when the transform does not use planning masks.
    assert trace(
        make_config(planning={"detector": "semantic"}, algorithm={"transform_mode": "gtpo"})
    ).ok


def test_semantic_detector_with_a_model_that_is_not_there():
    report = trace(make_config(planning={"detector": "semantic", "model": "/no/such/model"}))
    assert any(i.category == "dep" and "'/no/such/model' is not a local folder" in i.message for i in errors(report))


def test_plugin_declaring_scalar_but_varying_is_caught():
    from retrain.registry.core import register, unregister

    def liar(ctx):
        return [
            [a * (i + 1) for i in range(len(lp))]
            for a, lp in zip(ctx.episode_advantages, ctx.logprobs, strict=True)
        ]

    liar.token_varying = False
    register("transform_mode", "test_liar", liar)
    try:
        report = trace(
            make_config(
                algorithm={"advantage_mode": "grpo", "transform_mode": "test_liar"},
                backend={"backend": "prime_rl"},
            )
        )
    finally:
        unregister("transform_mode", "test_liar")
    assert not report.ok and any(i.category == "probe" for i in errors(report))


def test_a_backend_not_installed_here_is_not_judged_by_a_placeholders_capabilities(monkeypatch):
    # a machine with retrain-cli and Tinker's backend only: `retrain explain` of a local config
    # warns that local cannot run here, and does not refuse GTPO for a placeholder's capabilities
    from retrain.backends import catalog

    real = catalog._load_entry
    monkeypatch.setattr(catalog, "_load_entry", lambda name: (None, []) if name == "local" else real(name))
    report = trace(make_config(algorithm={"advantage_mode": "maxrl", "transform_mode": "gtpo_sepa"}))
    assert not report.flow.backend_installed
    assert report.ok, errors(report)
    assert any(i.severity == "warning" and "'local' is not installed" in i.message for i in report.issues)
