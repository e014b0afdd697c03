"""Config honesty: a key, value or backend option that no runtime code reads is refused at load
by name ("not built yet in this version"), and a walk over the schema and the option schemas
proves that nothing is accepted and then ignored."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from retrain.backends.catalog import BUILTIN_BACKENDS, definition_of
from retrain.config import ConfigError
from retrain.config.fields import all_fields
from retrain.config.schema import SECTIONS
from retrain.validation.built import NOT_BUILT, refused_keys
from retrain.validation.load import load_config

PACKAGES = Path(__file__).resolve().parents[2]
NOT_BUILT_TEXT = "not built yet in this version"


def errors_of(tmp_path: Path, text: str, *overrides: str) -> list[str]:
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(p, list(overrides))
    return [i.render() for i in info.value.issues]


def test_the_issue_config_is_refused_naming_each_key(tmp_path: Path) -> None:
    errs = errors_of(tmp_path, """\
[environment]
provider = "verifiers"
id = "primeintellect/gsm8k"
auto_install = true
[inference]
engine = "max"
""", "--prefix-caching", "false")
    assert all(NOT_BUILT_TEXT in e for e in errs), errs
    labels = ["[environment] auto_install", "[inference] engine", "--prefix-caching (command line)"]
    for label in labels:
        assert sum(label + ":" in e for e in errs) == 1, (label, errs)
    assert len(errs) == len(labels)
    assert "c.toml:4: [environment] auto_install" in "\n".join(errs)


def test_server_engines_and_their_keys_are_live(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('[inference]\nengine = "vllm"\nurl = "http://127.0.0.1:8000/v1"\nconcurrency = 8\n'
                 'importance_sampling_correction = true\n[training]\nmax_async_level = 1\ntop_p = 1.0\n')
    c = load_config(p).config
    assert c.inference.engine == "vllm" and c.training.max_async_level == 1 and c.inference.importance_sampling_correction
    (tmp_path / "k.toml").write_text('[inference]\nengine = "vllm"\n[training]\ntop_k = 20\nmin_p = 0.05\n')
    assert load_config(tmp_path / "k.toml").config.training.top_k == 20
    for engine in ("trtllm", "mlx"):
        assert NOT_BUILT_TEXT in errors_of(tmp_path, f'[inference]\nengine = "{engine}"\n')[0]
    # the local backend samples ahead in-process from a copy of the published versions
    (tmp_path / "ahead.toml").write_text("[training]\nmax_async_level = 8\n")
    assert load_config(tmp_path / "ahead.toml").config.training.max_async_level == 8
    errs = errors_of(tmp_path, "[backend]\nbackend = 'unsloth'\n[training]\nmax_async_level = 1\n")
    assert any("[training] max_async_level" in e and "inference server" in e for e in errs), errs
    # the Tinker service samples apart from the weights that train, one published version at a time
    (tmp_path / "tinker.toml").write_text("[backend]\nbackend = 'tinker'\n[training]\nmax_async_level = 1\n")
    assert load_config(tmp_path / "tinker.toml").config.training.max_async_level == 1
    errs = errors_of(tmp_path, "[backend]\nbackend = 'tinker'\n[training]\nmax_async_level = 2\n")
    assert len(errs) == 1 and "[training] max_async_level" in errs[0] and "at most 1" in errs[0], errs
    errs = errors_of(tmp_path, '[inference]\nengine = "vllm"\nurl = "localhost:8000"\n')
    assert "[inference] url" in errs[0] and "http://" in errs[0]


def test_async_settings_are_bounded_and_refused_where_they_cannot_work(tmp_path: Path) -> None:
    errs = errors_of(tmp_path, "[training]\nmax_async_level = 17\n")
    assert len(errs) == 1 and "[training] max_async_level" in errs[0], errs
    errs = errors_of(tmp_path, "[training]\nmax_async_level = 4\nmax_off_policy_steps = 2\n")
    assert len(errs) == 1 and "[training] max_off_policy_steps" in errs[0] and "all would be dropped" in errs[0], errs
    (tmp_path / "latest.toml").write_text("[training]\nmax_async_level = 4\nmax_off_policy_steps = 2\n"
                                          "async_versions = 'latest'\n")
    assert load_config(tmp_path / "latest.toml").config.training.max_off_policy_steps == 2
    errs = errors_of(tmp_path, "[training]\nmax_async_level = 2\n[backend.options]\ntrain_full_model = true\n")
    assert len(errs) == 1 and NOT_BUILT_TEXT in errs[0] and "full copy of the weights" in errs[0], errs
    for text, needle in [("[training]\nmax_async_level = 2\nasync_versions = 'latest'\n"
                          "[inference]\npartial_rollout_tokens = 8\n", NOT_BUILT_TEXT),
                         ("[training]\nmax_async_level = 2\n[inference]\nengine = 'vllm'\n"
                          "partial_rollout_tokens = 8\n", 'needs async_versions = "latest"')]:
        errs = errors_of(tmp_path, text)
        assert len(errs) == 1 and "[inference] partial_rollout_tokens" in errs[0] and needle in errs[0], errs
    (tmp_path / "partial.toml").write_text("[training]\nmax_async_level = 2\nasync_versions = 'latest'\n"
                                           "[inference]\nengine = 'vllm'\npartial_rollout_tokens = 8\n")
    assert load_config(tmp_path / "partial.toml").config.inference.partial_rollout_tokens == 8
    errs = errors_of(tmp_path, "[inference]\nengine = 'vllm'\n[backend.options]\ntrain_full_model = true\n")
    assert len(errs) == 1 and "[inference] engine" in errs[0] and NOT_BUILT_TEXT in errs[0], errs


LISTED_IN_THE_ISSUE = {
    "[training] sft_batch_order": "[training]\nsft_warmup_steps = 2\nsft_batch_order = 'length'\n",
    "[logging] generation_top_surprisal_limit": "[logging]\ngeneration_top_surprisal_limit = 5\n",
    "[inference] prefix_caching": "[inference]\nprefix_caching = false\n",
    "[environment] auto_install": "[environment]\nauto_install = true\n",
    "[plugins] strict": "[plugins]\nstrict = false\n",
    "[backend.options] liger_kernel": "[backend.options]\nliger_kernel = true\n",
    "[backend.options] sample_kv_quantization": "[backend.options]\nsample_kv_quantization = 'oscar'\n",
    "[backend.options] train_unsloth_fused_ce": "[backend.options]\ntrain_unsloth_fused_ce = 'auto'\n",
    "[backend.options] cudnn_causal_conv1d_shim": "[backend.options]\ncudnn_causal_conv1d_shim = true\n",
}


MEMORY_AND_DETERMINISM = """\
[training]
seed = 3
[backend]
devices = "gpu:0"
[backend.options]
strict_deterministic = true
lora_freeze_a = true
train_sft_microbatch_token_budget = 512
train_save_on_cpu = true
train_save_on_cpu_pin_memory = false
train_save_on_cpu_min_numel = 4096
cuda_empty_cache = false
cuda_expandable_segments = "yes"
gradient_checkpointing_use_reentrant = "true"
gradient_checkpointing_skip_last_n = 2
"""


def test_memory_and_determinism_options_are_live_on_local(tmp_path: Path) -> None:
    p = tmp_path / "ok.toml"
    p.write_text(MEMORY_AND_DETERMINISM)
    options = load_config(p).config.backend.options
    assert options["strict_deterministic"] is True and options["train_save_on_cpu_min_numel"] == 4096
    assert options["cuda_expandable_segments"] == "yes" and options["gradient_checkpointing_skip_last_n"] == 2
    errs = errors_of(tmp_path, '[backend.options]\ncuda_expandable_segments = "sometimes"\n')
    assert len(errs) == 1 and "cuda_expandable_segments" in errs[0] and "off, auto or on" in errs[0], errs
    # unsloth's training path has its own memory policy: still refused there
    errs = errors_of(tmp_path, "[backend]\nbackend = 'unsloth'\n[backend.options]\ntrain_save_on_cpu = true\n")
    assert len(errs) == 1 and "train_save_on_cpu" in errs[0] and NOT_BUILT_TEXT in errs[0], errs


TINKER_ONLY = {
    "[model] base_url": "[model]\nbase_url = 'http://x'\n",
    "[backend] throttle_dir": "[backend]\nthrottle_dir = '/tmp/t'\n",
    "[backend] max_concurrent": "[backend]\nmax_concurrent = 2\n",
}


@pytest.mark.parametrize("label", sorted(TINKER_ONLY))
def test_tinker_keys_are_refused_on_other_backends(tmp_path: Path, label: str) -> None:
    errs = errors_of(tmp_path, TINKER_ONLY[label])
    assert len(errs) == 1 and f'{label}: is read only by backend = "tinker"' in errs[0], errs
    live = tmp_path / "tinker.toml"
    live.write_text("[backend]\nbackend = 'tinker'\n" + TINKER_ONLY[label].replace("[backend]\n", ""))
    assert load_config(live).config.backend.backend == "tinker"  # live there


@pytest.mark.parametrize("label", sorted(LISTED_IN_THE_ISSUE))
def test_each_unbuilt_key_is_refused_alone_in_one_line(tmp_path: Path, label: str) -> None:
    errs = errors_of(tmp_path, LISTED_IN_THE_ISSUE[label])
    assert len(errs) == 1, errs
    assert f"{label}: " in errs[0] and NOT_BUILT_TEXT in errs[0] and "(hint: " in errs[0], errs


def test_defaults_and_live_values_of_listed_keys_load(tmp_path: Path) -> None:
    p = tmp_path / "ok.toml"
    p.write_text("""\
[training]
trainer = "retrain"
tl_grpo = false
sft_warmup_steps = 2
sft_lr = 1e-4
[echo]
enabled = false
weight = 0.05
[inference]
engine = "pytorch"
[backend]
devices = "gpu:1"
[logging]
checkpoint_artifacts = "off"
[backend.options]
liger_kernel = false
train_microbatch_size = 2
""")
    c = load_config(p).config
    assert c.backend.options["train_microbatch_size"] == 2 and c.backend.devices == "gpu:1"


def test_the_judge_and_its_keys_are_live(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("[reward]\ntype = 'judge'\njudge_model = 'grader'\njudge_base_url = 'http://127.0.0.1:8000/v1'\n"
                 "judge_client = 'verifiers'\njudge_concurrency = 4\njudge_retries = 1\n")
    loaded = load_config(p)
    assert loaded.config.reward.judge_concurrency == 4 and not loaded.warnings
    errs = errors_of(tmp_path, "[reward]\ntype = 'judge'\njudge_base_url = '127.0.0.1:8000'\n")
    assert len(errs) == 1 and "[reward] judge_base_url: '127.0.0.1:8000' must be an http://" in errs[0], errs
    p.write_text("[reward]\njudge_model = 'grader'\n")
    warnings = [w.render() for w in load_config(p).warnings]
    assert any("[reward] judge_model" in w and "type = \"judge\"" in w for w in warnings), warnings


def test_unknown_values_stay_unknown_not_unbuilt(tmp_path: Path) -> None:
    errs = errors_of(tmp_path, "[inference]\nengine = 'vlm'\n")
    assert len(errs) == 1 and "unknown inference engine 'vlm'" in errs[0] and NOT_BUILT_TEXT not in errs[0]


def test_cross_field_rules_of_unbuilt_features_do_not_pile_on(tmp_path: Path) -> None:
    errs = errors_of(tmp_path, "[inference]\nengine = 'mlx'\n")
    assert len(errs) == 1 and all(NOT_BUILT_TEXT in e for e in errs), errs


def test_environment_echo_and_tl_grpo_are_live(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('[environment]\nprovider = "openenv"\nid = "http://127.0.0.1:9"\nmax_turns = 4\n'
                 'rollout_env_workers = 8\nrollout_buffer_size = 4\nargs = {message_timeout_s = 5}\n'
                 '[echo]\nenabled = true\nweight = 0.1\n[training]\ntl_grpo = true\ntl_grpo_branch_size = 3\n')
    c = load_config(p).config
    assert c.environment.max_turns == 4 and c.echo.enabled and c.training.tl_grpo_branch_size == 3
    errs = errors_of(tmp_path, '[environment]\nprovider = "verifiers"\nid = "x"\n[training]\ntl_grpo = true\n')
    assert len(errs) == 1 and "[training] tl_grpo" in errs[0] and "openenv" in errs[0], errs
    p.write_text('[environment]\nprovider = "verifiers"\nid = "x"\nmax_turns = 3\n')
    assert load_config(p).config.environment.max_turns == 3
    errs = errors_of(tmp_path, '[environment]\nprovider = "verifiers"\nid = "x"\nrollout_buffer_size = 3\n')
    assert len(errs) == 1 and "[environment] rollout_buffer_size" in errs[0] and NOT_BUILT_TEXT in errs[0], errs
    errs = errors_of(tmp_path, '[echo]\nenabled = true\n')
    assert len(errs) == 1 and "[echo] enabled" in errs[0] and "OpenEnv" in errs[0], errs


def test_gpu_only_option_on_the_cpu_is_a_warning_naming_it(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("[backend]\ndevices = 'cpu'\n[backend.options]\ngradient_checkpointing = false\n")
    warnings = [w.render() for w in load_config(p).warnings]
    assert any("[backend.options] gradient_checkpointing" in w and "CPU" in w for w in warnings), warnings
    p.write_text("[backend]\ndevices = 'gpu:0'\n[backend.options]\ngradient_checkpointing = false\n")
    assert not any("gradient_checkpointing" in w.render() for w in load_config(p).warnings)
    p.write_text("[backend]\ndevices = 'cpu'\n[backend.options]\ntrain_save_on_cpu = true\ncuda_empty_cache = false\n")
    warnings = [w.render() for w in load_config(p).warnings]
    assert any("train_save_on_cpu" in w and "CPU memory already" in w for w in warnings), warnings
    assert any("cuda_empty_cache" in w and "no CUDA cache" in w for w in warnings), warnings


def test_duplicate_key_is_named_with_both_lines(tmp_path: Path) -> None:
    errs = errors_of(tmp_path, "[training]\nlr = 1e-4\nmax_steps = 3\nlr = 2e-4\n")
    assert len(errs) == 1
    assert "c.toml:4: [training] lr: set twice (first on line 2)" in errs[0], errs


def test_duplicate_table_is_named(tmp_path: Path) -> None:
    errs = errors_of(tmp_path, "[training]\nlr = 1e-4\n[model]\nmodel = 'tiny'\n[training]\nmax_steps = 3\n")
    assert "c.toml:5: [training]: table declared twice (first on line 1)" in errs[0], errs


def test_rejected_uncertainty_kinds_name_what_is_available(tmp_path: Path) -> None:
    errs = errors_of(tmp_path, "[algorithm]\nuncertainty_kind = 'varentropy'\n")
    assert "varentropy" in errs[0] and "surprisal, predictive_variance, shannon_entropy" in errs[0], errs
    errs = errors_of(tmp_path, "[backend]\nbackend = 'tinker'\n[algorithm]\nuncertainty_kind = 'shannon'\n")
    assert "shannon_entropy" in errs[0] and "available here: surprisal, predictive_variance" in errs[0], errs


def test_rejected_selectors_name_what_is_available_even_with_a_suggestion(tmp_path: Path) -> None:
    errs = errors_of(tmp_path, "[algorithm]\nadvantage_mode = 'maxr'\n")
    assert "did you mean 'maxrl'?" in errs[0] and "grpo, maxrl, reinforce_pp" in errs[0], errs


# -- the walk: every field and every option is read by runtime code or listed as not built --

# Sources that read the config without running anything: validation, the catalog of backend
# metadata, dependency probes, the preflight checks, the run's config snapshot, and the CLI
# (display and argument handling). A key read only there is not live.
#: what declares keys and options rather than reading them: the config schema, the catalog, and
#: each backend's definition and option schema (they name every option)
NOT_RUNTIME = ("retrain-cli/", "/retrain/config/", "/retrain/backends/options.py", "/retrain/backends/catalog.py",
               "/retrain/registry/", "/retrain/training/meta.py", "/definition.py", "/retrain/backends/local/schema.py")

# Fields whose only readers are config-time code but that still change what a run does, each
# with the reason. Empty today: every field is read where the run reads it. An entry needs a
# reason a reviewer can check, never "will be read later" (that is what NOT_BUILT is for).
CONFIG_TIME_ONLY: dict[str, str] = {}


def runtime_sources() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGES.glob("*/src/retrain/**/*.py")):
        rel = path.relative_to(PACKAGES).as_posix()
        if any(part in "/" + rel for part in NOT_RUNTIME):
            continue
        yield rel, ast.parse(path.read_text(encoding="utf-8"))


def section_reads(tree: ast.Module) -> set[tuple[str, str]]:
    """(section, attribute) pairs read as `<x>.<section>.<attr>` or through a local alias
    (`t = config.training` ... `t.lr`; tuple assignments included)."""
    aliases: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = (zip(target.elts, node.value.elts, strict=False)
                         if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                         else [(target, node.value)])
                for t, v in pairs:
                    if isinstance(t, ast.Name) and isinstance(v, ast.Attribute) and v.attr in SECTIONS:
                        aliases.setdefault(t.id, set()).add(v.attr)
    reads: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        if isinstance(base, ast.Attribute) and base.attr in SECTIONS:
            reads.add((base.attr, node.attr))
        elif isinstance(base, ast.Name):
            reads.update((section, node.attr) for section in aliases.get(base.id, ()))
    return reads


def string_constants(tree: ast.Module) -> set[str]:
    """The strings and attribute names of a module: an option is read as `options["name"]`
    or, through `LocalOptions`, as `options.name`."""
    return ({n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)})


@pytest.fixture(scope="module")
def sources() -> list[tuple[str, ast.Module]]:
    found = list(runtime_sources())
    assert any(rel.startswith("retrain-backends-local/") for rel, _ in found)
    return found


def test_every_schema_field_is_read_at_run_time_or_refused(sources: list[tuple[str, ast.Module]]) -> None:
    read: set[tuple[str, str]] = set()
    for _, tree in sources:
        read |= section_reads(tree)
    listed = refused_keys()
    silent = [f"[{f.section}] {f.key}" for f in all_fields()
              if (f.section, f.attr) not in read and f.dotted not in listed and f.dotted not in CONFIG_TIME_ONLY]
    assert not silent, f"accepted but read by no runtime code; list them in validation/built.py: {silent}"


def test_every_option_of_a_built_backend_is_read_or_refused(sources: list[tuple[str, ast.Module]]) -> None:
    constants: set[str] = set()
    for _, tree in sources:
        constants |= string_constants(tree)
    checked = 0
    for backend in BUILTIN_BACKENDS:
        definition = definition_of(backend)
        if not definition.available:
            continue  # the whole backend is refused (not built yet); its options cannot run
        listed = definition.not_built_options
        silent = sorted(k for k in definition.option_schema or {} if k not in constants and k not in listed)
        assert not silent, f"{backend} options read by nothing; list them in its definition's NOT_BUILT: {silent}"
        checked += len(definition.option_schema or {})
    assert checked >= 40


def test_the_walk_sees_real_reads(sources: list[tuple[str, ast.Module]]) -> None:
    """Guards the scanner itself: keys known to be live are found, known dead ones are not."""
    read: set[tuple[str, str]] = set()
    for _, tree in sources:
        read |= section_reads(tree)
    assert {("training", "lr"), ("optimizer", "beta1"), ("sepa", "delay_steps"), ("logging", "wandb_tags"),
            ("model", "base_url"), ("backend", "throttle_dir")} <= read
    assert not {("environment", "auto_install")} & read


def test_the_table_names_real_keys_and_options() -> None:
    dotted = {f.dotted for f in all_fields()}
    for entry in NOT_BUILT:
        assert entry.where in dotted or entry.where in SECTIONS, entry.where
        assert entry.instead, entry.where
    for backend in BUILTIN_BACKENDS:
        definition = definition_of(backend)
        assert set(definition.not_built_options) <= set(definition.option_schema or {}), backend


def test_unavailable_backends_say_not_built() -> None:
    d = definition_of("prime_rl")
    assert not d.available and NOT_BUILT_TEXT in d.note, d.note
    assert definition_of("tinker").available and definition_of("unsloth").available


def test_several_devices_are_live_for_the_local_backend_and_refused_by_name_otherwise(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("[backend]\ndevices = 'gpu:0,gpu:1'\n")
    assert load_config(p).config.backend.devices == "gpu:0,gpu:1"
    errs = errors_of(tmp_path, "[backend]\nbackend = 'tinker'\ndevices = 'gpu:0,gpu:1'\n")
    assert len(errs) == 1 and "[backend] devices" in errs[0] and NOT_BUILT_TEXT in errs[0] and "'tinker'" in errs[0]
    (tmp_path / "served.toml").write_text("[backend]\ndevices = 'cpu,cpu'\n[training]\nmax_async_level = 2\n"
                                          "[inference]\nengine = 'vllm'\nurl = 'http://h:1/v1'\n")
    assert load_config(tmp_path / "served.toml").config.training.max_async_level == 2
    for text, label in [("[training]\nmax_async_level = 2\n", "[training] max_async_level"),
                        ("[training]\npolicy_loss_mode = 'kl_cov'\ntop_p = 1.0\n", "[training] policy_loss_mode")]:
        errs = errors_of(tmp_path, "[backend]\ndevices = 'cpu,cpu'\n" + text)
        assert len(errs) == 1 and label in errs[0] and f"with 2 devices is {NOT_BUILT_TEXT}" in errs[0], errs
    assert "twice" in errors_of(tmp_path, "[backend]\ndevices = 'gpu:0,gpu:0'\n")[0]
    assert "mixes the CPU and GPUs" in errors_of(tmp_path, "[backend]\ndevices = 'cpu,gpu:0'\n")[0]


def test_several_devices_refuse_what_does_not_run_on_several_processes_yet(tmp_path: Path) -> None:
    for text, label in [("[training]\ntrainer = 'sft'\nsft_data_path = 'd.jsonl'\n", "[training] trainer"),
                        ("[training]\nkl_coef = 0.1\n", "[training] kl_coef"),
                        ('[environment]\nprovider = "openenv"\nid = "http://127.0.0.1:9"\n', "[environment] provider")]:
        errs = errors_of(tmp_path, "[backend]\ndevices = 'cpu,cpu'\n" + text)
        assert any(label in e and f"with 2 devices is {NOT_BUILT_TEXT}" in e for e in errs), errs
