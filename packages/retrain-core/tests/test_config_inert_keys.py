"""Keys of a feature the config leaves off: set away from their default, each loads with one
one-line warning naming the key and the switch that would read it (retrain.validation.inert),
and stays quiet once the feature is on."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrain.advantages.algorithm import BUILTIN_ALGORITHMS
from retrain.advantages.transform import BUILTIN_TRANSFORMS
from retrain.backends.catalog import definition_of
from retrain.config.fields import all_fields
from retrain.registry import builtin
from retrain.validation.inert import INERT
from retrain.validation.load import load_config
from retrain.validation.page import render_markdown

# label -> (the key set while its feature is off, the switch the warning names, the same key live)
REPORTED: dict[str, tuple[str, str, str]] = {
    "[planning] threshold": ("[planning]\nthreshold = 0.5\n", '[planning] detector = "semantic"',
                             "[planning]\nthreshold = 0.5\ndetector = 'semantic'\n"),
    "[eval] k": ("[eval]\nk = 4\n", "[eval] every = N",
                 "[eval]\nk = 4\nevery = 5\n[data]\nsource = 'arithmetic'\n"),
    "[eval] pass_threshold": ("[eval]\npass_threshold = 0.5\n", "[eval] every = N",
                              "[eval]\npass_threshold = 0.5\nat_end = true\n[data]\nsource = 'arithmetic'\n"),
    "[inference] concurrency": ("[inference]\nconcurrency = 8\n", '[inference] engine = "vllm"',
                                "[inference]\nconcurrency = 8\nengine = 'vllm'\n"),
    "[inference] url": ("[inference]\nurl = 'http://127.0.0.1:8000'\n", '[inference] engine = "vllm"',
                        "[inference]\nurl = 'http://127.0.0.1:8000'\nengine = 'vllm'\n"),
    "[inference] importance_sampling_cap": (
        "[inference]\nimportance_sampling_cap = 3.0\n", "importance_sampling_correction = true",
        "[inference]\nimportance_sampling_cap = 3.0\nimportance_sampling_correction = true\n[training]\ntop_p = 1.0\n"),
    "[training] kl_estimator": ("[training]\nkl_estimator = 'k1'\n", "kl_coef > 0",
                                "[training]\nkl_estimator = 'k1'\nkl_coef = 0.05\n"),
    "[echo] weight": ("[echo]\nweight = 0.1\n", "[echo] enabled = true",
                      "[echo]\nweight = 0.1\nenabled = true\n[environment]\nprovider = 'openenv'\n"
                      "id = 'http://127.0.0.1:9'\n"),
    "[training] tl_grpo_branch_size": (
        "[training]\ntl_grpo_branch_size = 3\n", "[training] tl_grpo = true",
        "[training]\ntl_grpo_branch_size = 3\ntl_grpo = true\n[environment]\nprovider = 'openenv'\n"
        "id = 'http://127.0.0.1:9'\n"),
    "[backpressure] peak_gflops": ("[backpressure]\npeak_gflops = 100.0\n", "[backpressure] enabled = true",
                                   "[backpressure]\npeak_gflops = 100.0\nenabled = true\n"),
    "[gtpo] beta": ("[algorithm]\ntransform_mode = 'delight'\n[gtpo]\nbeta = 0.3\n", 'transform_mode = "gtpo"',
                    "[algorithm]\ntransform_mode = 'gtpo'\n[gtpo]\nbeta = 0.3\n"),
    "[hicra] alpha": ("[algorithm]\nalgorithm_mode = 'reinforce_pp_delight'\n[hicra]\nalpha = 0.5\n",
                      'transform_mode = "gtpo_hicra"',
                      "[algorithm]\nalgorithm_mode = 'maxrl_gtpo_hicra'\n[hicra]\nalpha = 0.5\n"),
    "[backend.options] train_save_on_cpu": (
        "[backend]\ndevices = 'cpu'\n[backend.options]\ntrain_save_on_cpu = true\n", '[backend] devices = "gpu:N"',
        "[backend]\ndevices = 'gpu:0'\n[backend.options]\ntrain_save_on_cpu = true\n"),
    "[data] path": ("[data]\nsource = 'arithmetic'\npath = 'problems.jsonl'\n", '[data] source = "math"',
                    "[data]\nsource = 'math'\npath = 'problems.jsonl'\n"),
}


def warnings_of(tmp_path: Path, text: str) -> list[str]:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return [w.render() for w in load_config(p).warnings]


@pytest.mark.parametrize("label", sorted(REPORTED))
def test_a_key_of_a_feature_that_is_off_warns_once_naming_the_switch(tmp_path: Path, label: str) -> None:
    off, switch, _ = REPORTED[label]
    named = [w for w in warnings_of(tmp_path, off) if f"{label}:" in w]
    assert len(named) == 1, named
    assert "not read" in named[0] and switch in named[0] and "\n" not in named[0], named[0]


@pytest.mark.parametrize("label", sorted(REPORTED))
def test_the_same_key_is_quiet_when_its_feature_is_on(tmp_path: Path, label: str) -> None:
    _, _, live = REPORTED[label]
    assert not [w for w in warnings_of(tmp_path, live) if f"{label}:" in w]


def test_defaults_written_out_do_not_warn(tmp_path: Path) -> None:
    text = ("[inference]\nconcurrency = 64\nimportance_sampling_cap = 2.0\n[training]\nkl_estimator = 'k3'\n"
            "[backend]\ndevices = 'cpu'\n[backend.options]\ntrain_save_on_cpu = false\ncuda_empty_cache = true\n"
            "[gtpo]\nbeta = 0.1\n[algorithm]\ntransform_mode = 'delight'\n")
    assert warnings_of(tmp_path, text) == []


def test_a_key_two_rules_leave_unread_gets_one_warning(tmp_path: Path) -> None:
    text = ("[environment]\nprovider = 'openenv'\nid = 'http://127.0.0.1:9'\n"
            "[data]\nsource = 'arithmetic'\npath = 'p.jsonl'\n")
    named = [w for w in warnings_of(tmp_path, text) if "[data] path:" in w]
    assert len(named) == 1 and "provider" in named[0], named


def test_a_gpu_on_the_config_makes_cuda_options_live_whatever_this_machine_has(tmp_path: Path) -> None:
    """The rule reads the configured devices (this machine may have no CUDA at all)."""
    text = "[backend]\ndevices = '{}'\n[backend.options]\nsample_cuda_graphs = false\n"
    assert any("sample_cuda_graphs" in w for w in warnings_of(tmp_path, text.format("cpu")))
    assert not any("sample_cuda_graphs" in w for w in warnings_of(tmp_path, text.format("gpu:3")))


def test_a_plugin_backend_marks_its_own_cuda_only_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule reads the configured backend's option schema, whatever backend it is."""
    (tmp_path / "cudaopt_backend.py").write_text(
        "def retrain_backend_option_schema(options):\n"
        "    return {'graphs': {'type': 'bool', 'default': True, 'cuda_only': 'graphs need CUDA'},\n"
        "            'speed': {'type': 'int', 'default': 1}}\n"
        "def make(config):\n    raise RuntimeError\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    text = ("[backend]\nbackend = 'cudaopt_backend.make'\ndevices = '{}'\n"
            "[backend.options]\ngraphs = false\nspeed = 3\n")
    on_cpu = [w for w in warnings_of(tmp_path, text.format("cpu")) if "[backend.options]" in w]
    assert len(on_cpu) == 1 and "graphs: not read: the run trains on the CPU (graphs need CUDA)" in on_cpu[0], on_cpu
    assert not [w for w in warnings_of(tmp_path, text.format("gpu:0")) if "[backend.options]" in w]


def test_the_local_backends_cuda_only_options() -> None:
    marked = {name for name, spec in definition_of("local").option_schema.items() if spec.cuda_only}
    assert marked == {"gradient_checkpointing", "gradient_checkpointing_use_reentrant",
                      "gradient_checkpointing_skip_last_n", "train_save_on_cpu", "train_save_on_cpu_pin_memory",
                      "train_save_on_cpu_min_numel", "cuda_empty_cache", "cuda_expandable_segments",
                      "sample_cuda_graphs", "train_compile_selective_ce", "train_compile_selective_ce_min_tokens"}
    assert not [name for name, spec in definition_of("unsloth").option_schema.items() if spec.cuda_only]


def test_plugins_decide_what_they_read(tmp_path: Path) -> None:
    text = "[algorithm]\ntransform_mode = 'plugins.my_transform'\n[gtpo]\nbeta = 0.3\n[hicra]\nalpha = 0.4\n"
    p = tmp_path / "c.toml"
    p.write_text(text)
    warnings = [w.render() for w in load_config(p, import_plugins=False).warnings]
    assert not [w for w in warnings if "[gtpo] beta" in w or "[hicra] alpha" in w], warnings


def test_every_rule_names_real_keys_and_options() -> None:
    dotted = {f.dotted for f in all_fields()}
    for rule in INERT:
        assert rule.keys and rule.switch, rule
        for key in rule.keys:
            assert key in dotted, key


def test_transform_facts_by_name_match_the_transforms() -> None:
    t = BUILTIN_TRANSFORMS
    assert set(builtin.GTPO_TRANSFORMS) == {n for n, x in t.items() if x.use_gtpo and x.context is None}
    assert set(builtin.HICRA_TRANSFORMS) == {n for n, x in t.items() if x.apply_hicra}
    assert set(builtin.PLANNING_TRANSFORMS) == {n for n, x in t.items() if x.needs_planning}
    assert set(builtin.SEPA_TRANSFORMS) == {n for n, x in t.items() if x.uses_sepa_controller}
    assert set(builtin.MASK_TRANSFORMS) == {n for n, x in t.items() if x.post_process is not None}
    assert {n: r.transform for n, r in BUILTIN_ALGORITHMS.items()} == builtin.ALGORITHM_TRANSFORMS


def test_the_configuration_reference_names_each_switch() -> None:
    text = render_markdown()
    line = next(x for x in text.splitlines() if x.startswith("| `kl_estimator` "))
    assert "**Live with** [training] kl_coef > 0." in line
