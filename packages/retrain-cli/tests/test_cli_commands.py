"""The foundation commands on real configs: explain, init, backends, doctor, man, migrate-config."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from retrain.commands.init.templates import TEMPLATES
from retrain.config.schema import LOSS_AGGREGATIONS

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data"


def test_help_lists_commands(cli) -> None:  # type: ignore[no-untyped-def]
    res = cli("--help")
    assert res.code == 0
    for verb in ("explain", "init", "backends", "doctor", "man", "migrate-config"):
        assert verb in res.stdout
    assert "\n  run " not in res.stdout.split("Commands:")[1]


def test_version(cli) -> None:  # type: ignore[no-untyped-def]
    res = cli("--version")
    assert res.code == 0 and "retrain-core 0.1.0" in res.stdout


def test_explain_reference_example(cli) -> None:  # type: ignore[no-untyped-def]
    res = cli("explain", str(DATA / "reference_example.toml"), "--json")
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["condition"] == "grpo+none"
    assert data["datums_per_step"] == 16 and data["total_datums"] == 320
    assert data["log_dir"] == "logs/mini" and data["lora_alpha"] == 64
    assert data["backend_capabilities"]["preserves_token_advantages"] is True


def test_explain_research_config_text(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    res = cli("explain", str(DATA / "research.toml"))
    assert res.code == 2 and ("research.toml:76: [training] policy_loss_mode: policy_loss_mode = 'clip_cov' with 2 devices "
                               "is not built yet") in res.stderr
    problems = [line for line in res.stderr.splitlines() if line.startswith("  ")]
    # max_concurrent is read by the tinker backend only; this config trains on local; and two keys of its
    # free-form tables are read by nothing
    assert problems and all("not built yet in this version" in p or ("max_concurrent" in p and "tinker" in p)
                            or "unknown key" in p for p in problems), res.stderr
    # without what is not built or read, the same research config explains
    keep = [line for line in (DATA / "research.toml").read_text().splitlines()
            if not any(f"{key} " in line for key in (*UNBUILT_IN_RESEARCH, *UNREAD_IN_RESEARCH))]
    (tmp_path / "r.toml").write_text("\n".join(keep) + "\n")
    res = cli("explain", "r.toml")
    assert res.code == 0, res.stderr
    assert "retrain explain — dry-run preview (single)" in res.stdout
    assert "maxrl+gtpo_sepa" in res.stdout and "clip_cov" in res.stdout


UNREAD_IN_RESEARCH = ("sepa_amp_alpha", "baseline")
UNBUILT_IN_RESEARCH = ("devices", "max_concurrent", "liger_kernel", "sft_batch_order", "sft_length_bucket_size",
                       "attention_kernel", "dtype", "generation_top_surprisal_limit")


def test_explain_overrides_and_default_file(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    shutil.copy(DATA / "reference_example.toml", tmp_path / "retrain.toml")
    res = cli("explain", "--max-steps", "5", "--json")
    data = json.loads(res.stdout)
    assert data["config"] == "retrain.toml" and data["max_steps"] == 5 and data["total_datums"] == 80


def test_explain_repo_demo_config(cli) -> None:  # type: ignore[no-untyped-def]
    res = cli("explain", "--json", cwd=REPO)
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["model"] == "tiny" and data["data"] == "arithmetic" and data["devices"] == "cpu"


def _cached_gsm8k(root: Path) -> Path:
    """What `datasets.load_dataset("openai/gsm8k", "main")` leaves in its cache, made offline from
    a few local rows (the `dataset` template reads the hub id from there)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets.packaged_modules.parquet.parquet import Parquet

    rows = [{"question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"} for i in range(8)]
    for split in ("train", "test"):
        pq.write_table(pa.Table.from_pylist(rows), root / f"{split}.parquet")
    cache = root / "datasets-cache"
    Parquet(cache_dir=str(cache), dataset_name="gsm8k", config_name="main", repo_id="openai/gsm8k", hash="0",
            data_files={s: str(root / f"{s}.parquet") for s in ("train", "test")}).download_and_prepare()
    (made,) = (cache / "openai___gsm8k").iterdir()
    made.rename(made.with_name("main"))
    return cache


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_every_template_writes_and_explains(cli, tmp_path: Path, name: str,  # type: ignore[no-untyped-def]
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    if name == "dataset":  # explain opens the data the run reads: the template's hub id, cached
        monkeypatch.setenv("HF_DATASETS_CACHE", str(_cached_gsm8k(tmp_path)))
    res = cli("init", "--template", name)
    assert res.code == 0, res.stderr
    target = tmp_path / TEMPLATES[name].filename
    assert f"Created {TEMPLATES[name].filename} (template: {name})" in res.stdout
    tomllib.loads(target.read_text())
    res = cli("explain", str(target), "--json")
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["mode"] == ("campaign" if name == "campaign" else "single")


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_a_real_model_template_is_its_example_profile(name: str) -> None:
    """`init -t smollm2` writes examples/smollm2-arithmetic.toml's settings (gemma3 likewise);
    only where it writes differs."""
    example = Path(__file__).resolve().parents[3] / "examples" / f"{name}-arithmetic.toml"
    ours, theirs = tomllib.loads(TEMPLATES[name].text()), tomllib.loads(example.read_text())
    for table in (ours, theirs):
        table["backend"].pop("adapter_path")
        table["logging"].pop("log_dir")
    assert ours == theirs


def test_the_cpu_template_is_the_readme_demo() -> None:
    """`init -t cpu` writes the repository's retrain.toml, settings and all; only where it
    writes differs (tests/test_init_templates.py runs it)."""
    demo = Path(__file__).resolve().parents[3] / "retrain.toml"
    ours, theirs = tomllib.loads(TEMPLATES["cpu"].text()), tomllib.loads(demo.read_text())
    assert (ours["backend"].pop("adapter_path"), ours["logging"].pop("log_dir")) == ("adapters/cpu", "logs/cpu")
    theirs["backend"].pop("adapter_path")
    theirs["logging"].pop("log_dir")
    assert ours == theirs


def test_init_list_and_refusal(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    listed = cli("init", "--list").stdout
    assert "quickstart" in listed and "campaign" in listed and "verifiers" in listed and "openenv" in listed
    assert "verifiers-multi-turn" in listed
    (tmp_path / "retrain.toml").write_text("x")
    res = cli("init")
    assert res.code == 2 and "refusing to overwrite" in res.stderr
    assert (tmp_path / "retrain.toml").read_text() == "x"
    assert cli("init", "--force").code == 0
    res = cli("init", "-t", "quikstart")
    assert res.code == 2 and "did you mean 'quickstart'" in res.stderr


def test_campaign_explain(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "c.toml").write_text(
        "[campaign]\nseeds = [1, 2]\n[[campaign.conditions]]\nadvantage_mode = 'grpo'\ntransform_mode = 'none'\n"
        "lr = 1e-4\n[[campaign.conditions]]\nadvantage_mode = 'maxrl'\ntransform_mode = 'gtpo'\n"
        "[training]\nmax_steps = 12\n")
    data = json.loads(cli("explain", "c.toml", "--json").stdout)
    assert data["conditions"] == ["grpo+none~lr=0.0001", "maxrl+gtpo"]
    assert data["total_runs"] == 4 and data["max_steps"] == 12


def test_campaign_condition_validated_on_base(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "c.toml").write_text(
        "[campaign]\n[[campaign.conditions]]\nadvantage_mode = 'grpo'\ntransform_mode = 'none'\nclip_eps_high = 0.3\n"
        "[[campaign.conditions]]\nadvantage_mode = 'grpo'\ntransform_mode = 'none'\nlrr = 1\n")
    res = cli("explain", "c.toml")
    assert res.code == 2
    assert "#1 [training] clip_eps_high: needs clip_eps > 0" in res.stderr
    assert "#2 lrr: unknown field" in res.stderr


def test_squeeze_explain(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "s.toml").write_text("[squeeze]\nadapter_path = 'a'\n[model]\nlora_rank = 16\n")
    data = json.loads(cli("explain", "s.toml", "--json").stdout)
    assert data == {"mode": "squeeze", "config": "s.toml", "adapter_path": "a", "source_rank": 16,
                    "min_variance_retention": 0.95}
    (tmp_path / "t.toml").write_text("[squeeze]\n")
    res = cli("explain", "t.toml")
    assert res.code == 2 and "[squeeze] adapter_path: required" in res.stderr


def test_backends_json(cli, fake_backend) -> None:  # type: ignore[no-untyped-def]
    from importlib import metadata

    fake_backend((3, 0))
    data = json.loads(cli("backends", "--json").stdout)
    by_name = {b["name"]: b for b in data["builtins"]}
    for name in ("local", "tinker", "unsloth"):  # installed exactly when their distribution is
        installed = bool(metadata.entry_points(group="retrain.backends", name=name))
        assert by_name[name]["installed"] is installed, name
        # 2.0: each definition states its own capabilities and options; 2.1: tinker's checkpoint record;
        # 2.2: local's prompt tokenizer and the local and unsloth exporters; local's teacher models
        built_against = {"tinker": "2.1", "local": "2.2", "unsloth": "2.2"}[name]
        assert by_name[name]["contract"] == (built_against if installed else None), name
    local = bool(metadata.entry_points(group="retrain.backends", name="local"))
    assert by_name["local"]["status"] == ("available" if local else "not installed")
    tinker = bool(metadata.entry_points(group="retrain.backends", name="tinker"))
    assert by_name["tinker"]["status"] == ("available" if tinker else "not installed")
    assert by_name["tinker"]["capabilities"]["loss_aggregations"] == list(LOSS_AGGREGATIONS)
    assert by_name["prime_rl"]["status"] == "not built yet in this version"
    assert "train_microbatch_size" in by_name["local"]["option_schema"]
    assert data["plugin"]["entry_point_group"] == "retrain.backends"
    assert data["contracts"] == {"backend": "2.2", "environment": "1.2"}
    (foo,) = data["entry_points"]
    assert foo["distribution"] == "retrain-backends-foo" and foo["contract"] == "3.0"
    assert foo["status"] == "unusable (see problem)" and "supports backend contract 2.0 to 2.2" in foo["problems"][0]


def test_backends_text_shows_contracts(cli, fake_backend) -> None:  # type: ignore[no-untyped-def]
    fake_backend((3, 0))
    out = cli("backends").stdout
    assert out.startswith("Contracts: backend 2.0 to 2.2, environment 1.0 to 1.2 (retrain-core ")
    assert "  foo       unusable (see problem)         [retrain-backends-foo, contract 3.0] (entry_point)" in out
    assert "problem: retrain-backends-foo 0.3.0 declares backend contract 3.0;" in out
    assert "Environments:" in out


def test_doctor(cli) -> None:  # type: ignore[no-untyped-def]
    res = cli("doctor")
    assert res.code == 0 and "retrain-core" in res.stdout and "CUDA devices" in res.stdout
    data = json.loads(cli("doctor", "--json").stdout)
    assert {p["module"] for p in data["packages"]} >= {"torch", "tinker", "verifiers"}


def test_man(cli) -> None:  # type: ignore[no-untyped-def]
    topics = cli("man", "--list-topics").stdout.split()
    assert {"quickstart", "configuration", "options", "campaign", "squeeze", "tree", "benchmark",
            "tinker"} <= set(topics)
    tinker = cli("man", "tinker").stdout
    assert "TINKER_API_KEY" in tinker and "load_state_with_optimizer" in tinker and "loss_aggregation" in tinker
    res = cli("man", "--topic", "options")
    assert "--optim-beta1" in res.stdout and "--backend-opt KEY=VALUE" in res.stdout
    data = json.loads(cli("man", "configuration", "--json").stdout)
    assert data["topic"] == "configuration" and "[training]" in data["content"]
    assert "clip_cov_ratio" in data["content"]
    res = cli("man", "--topic", "quikstart")
    assert res.code == 2 and "did you mean 'quickstart'" in res.stderr
    full = cli("man", "--all")
    assert full.code == 0 and "QUICKSTART" in full.stdout


LEGACY = '[backend]\nbackend = "prime_rl"\nprime_rl_zmq_port = 6000\n'


def test_migrate_config_modes(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "c.toml").write_text(LEGACY)
    res = cli("migrate-config", "c.toml")
    assert res.code == 0 and "+zmq_port = 6000" in res.stdout
    res = cli("migrate-config", "c.toml", "--check")
    assert res.code == 1 and "Migration required" in res.stdout
    res = cli("migrate-config", "c.toml", "--write", "--backup")
    assert res.code == 0 and (tmp_path / "c.toml.bak").read_text() == LEGACY
    assert "[backend.options]" in (tmp_path / "c.toml").read_text()
    res = cli("migrate-config", "c.toml", "--check")
    assert res.code == 0 and "No migration needed" in res.stdout
    res = cli("migrate-config", "--stdin", "--stdout", input=LEGACY)
    assert tomllib.loads(res.stdout)["backend"]["options"] == {"zmq_port": 6000}
    report = json.loads(cli("migrate-config", "--stdin", "--json", input=LEGACY).stdout)
    assert report["legacy_keys"] == ["prime_rl_zmq_port"] and report["needs_migration"]


@pytest.mark.parametrize("args", [
    ["--check", "--write", "c.toml"], ["--backup", "c.toml"], ["c.toml", "--stdin"], [],
    ["c.toml", "--write", "--output", "x.toml"],
])
def test_migrate_config_conflicts(cli, tmp_path: Path, args: list[str]) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "c.toml").write_text(LEGACY)
    res = cli("migrate-config", *args)
    assert res.code == 2 and res.stderr.startswith("error: ")


def test_backends_say_what_is_not_built(cli) -> None:  # type: ignore[no-untyped-def]
    text = cli("backends").stdout
    assert "prime_rl  not built yet in this version" in text
    assert "unsloth   not built yet" not in text and "tinker    not built yet" not in text
    if "unsloth   not installed" not in text:
        assert "runs here: no: no CUDA GPU found" in text or "runs here: yes" in text
    from retrain.backends.catalog import definition_of

    assert f"not built yet ({len(definition_of('local').not_built_options)}, refused when set), and why:" in text
    local_text = text.split("\n  unsloth ")[0]
    for option in ("liger_kernel", "sample_kv_quantization", "train_unsloth_fused_ce"):
        assert len(re.findall(rf"\b{option}[,:]", local_text)) == 1, option  # listed once, with its reason
    flat = " ".join(local_text.split())
    assert "flash_attn_with_kvcache, a CUDA-only kernel" in flat and "runs on CUDA GPUs only" in flat
    assert "lora_fast_linear" not in local_text  # built on local
    local = {b["name"]: b for b in json.loads(cli("backends", "--json").stdout)["builtins"]}["local"]
    schema = local["option_schema"]
    assert schema["train_microbatch_size"]["built"] is True and schema["liger_kernel"]["built"] is False
    assert schema["strict_deterministic"]["built"] is True and schema["lora_freeze_a"]["built"] is True
