"""The first hour at the command line: a misspelt command is named as one, `man` alone is a
table of contents, `plugins` and `doctor` say only what is built, a wrong reward function is
blamed on custom_function, and an unbuilt option may be set to the value that means off."""

import json
from pathlib import Path

from retrain.commands.manual.topic import SUMMARIES, topic_names


def test_a_misspelt_command_is_an_unknown_command(cli) -> None:  # type: ignore[no-untyped-def]
    res = cli("stauts")
    assert res.code == 2
    assert res.stderr.startswith("error: unknown command 'stauts', did you mean 'status'?"), res.stderr
    assert "file not found" not in res.stderr and "Traceback" not in res.stderr
    res = cli("frobnicate")
    assert res.code == 2 and "unknown command 'frobnicate'" in res.stderr and "did you mean" not in res.stderr


def test_a_missing_toml_path_is_still_file_not_found(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    res = cli("stauts.toml")
    assert res.code == 2 and "stauts.toml: file not found" in res.stderr and "unknown command" not in res.stderr
    res = cli("configs/run")
    assert res.code == 2 and "unknown command" not in res.stderr
    (tmp_path / "stauts").write_text("not = [toml\n")  # an existing file is a config, whatever its name
    res = cli("stauts")
    assert res.code == 2 and "unknown command" not in res.stderr


def test_status_logdir_is_not_taken_for_a_command(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    res = cli("status", "nosuchdir")
    assert res.code == 2 and "No log directory found" in res.stderr


def test_man_alone_lists_topics_and_all_prints_everything(cli) -> None:  # type: ignore[no-untyped-def]
    names = topic_names()
    assert sorted(SUMMARIES) == names  # every topic file has its line, and no line is stale
    res = cli("man")
    assert res.code == 0
    lines = res.stdout.splitlines()
    assert len(lines) < len(names) + 12, len(lines)
    for name in names:
        assert sum(line.split()[:1] == [name] for line in lines) == 1, name
    assert "retrain man TOPIC" in res.stdout and "retrain man --all" in res.stdout
    assert "QUICKSTART" not in res.stdout
    full = cli("man", "--all")
    assert full.code == 0 and "QUICKSTART" in full.stdout and "CONFIGURATION" in full.stdout
    assert len(full.stdout.splitlines()) > 10 * len(lines)
    listed = json.loads(cli("man", "--json").stdout)["topics"]
    assert [t["topic"] for t in listed] == names and all(t["summary"] for t in listed)
    everything = json.loads(cli("man", "--all", "--json").stdout)["topics"]
    assert all(t["content"] for t in everything)


def test_plugins_mark_what_is_not_built(cli) -> None:  # type: ignore[no-untyped-def]
    text = cli("plugins").stdout
    line = {row.split()[0]: row for row in text.splitlines() if row.startswith("  ") and row.split()}
    for name in ("max", "trtllm", "mlx"):
        assert "not built yet" in line[name], line[name]
    for name in ("match", "custom", "judge", "pytorch", "vllm", "retrain"):
        assert "not built yet" not in line[name], line[name]
    kinds = json.loads(cli("plugins", "--json").stdout)["kinds"]
    assert kinds["reward"]["not_built"] == []
    assert kinds["inference_engine"]["not_built"] == ["max", "trtllm", "mlx"]
    assert kinds["advantage_mode"]["not_built"] == []


def _custom_reward(tmp_path: Path, module: str, function: str) -> None:
    (tmp_path / "myrewards.py").write_text("def score(response, reference):\n    return 1.0\n")
    (tmp_path / "c.toml").write_text(f'[reward]\ntype = "custom"\ncustom_module = "{module}"\n'
                                     f'custom_function = "{function}"\n')


def test_a_misspelt_reward_function_is_blamed_on_custom_function(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _custom_reward(tmp_path, "myrewards", "scroe")
    res = cli("explain", "c.toml")
    assert res.code == 2
    assert "[reward] custom_function" in res.stderr and "[reward] custom_module" not in res.stderr, res.stderr
    assert "'scroe'" in res.stderr and "did you mean 'score'" in res.stderr
    _custom_reward(tmp_path, "myrewardz", "score")
    res = cli("explain", "c.toml")
    assert res.code == 2 and "[reward] custom_module" in res.stderr and "custom_function" not in res.stderr
    _custom_reward(tmp_path, "myrewards", "score")
    assert cli("explain", "c.toml").code == 0


def test_doctor_suggests_only_what_changes_behaviour(cli) -> None:  # type: ignore[no-untyped-def]
    res = cli("doctor")
    assert res.code == 0 and "liger" not in res.stdout.lower()
    packages = json.loads(cli("doctor", "--json").stdout)["packages"]
    assert "liger_kernel" not in {p["module"] for p in packages}
    assert not any("judge" in p["purpose"] for p in packages)


def test_an_unbuilt_option_set_to_off_is_accepted(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for value in ("false", "off", "0"):
        res = cli("explain", "--backend-opt", f"liger_kernel={value}")
        assert res.code == 0 and "not built" not in res.stderr, res.stderr
    assert cli("explain", "--backend-opt", "liger_fused_linear_ce=false").code == 0
    for backend in ("local", "unsloth"):  # off by default on both: asking for it is asking for what is not built
        res = cli("explain", "--backend", backend, "--backend-opt", "liger_kernel=true")
        assert res.code == 2 and "[backend.options] liger_kernel" in res.stderr and "not built yet" in res.stderr
    assert cli("explain", "--backend", "unsloth", "--backend-opt", "cuda_empty_cache=false").code == 0
    for value in ("true", "false"):  # built: both live
        assert cli("explain", "--backend-opt", f"lora_fast_linear={value}").code == 0
    res = cli("explain", "--backend-opt", "sample_kv_quantization=oscar")
    assert res.code == 2 and "not built yet" in res.stderr


def test_doctor_says_whether_the_packaged_model_is_installed(cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from retrain.commands.doctor import probe

    monkeypatch.setattr(probe, "PACKAGED_MODELS", (probe.PACKAGED_MODELS[0],
                                                   ("nothing-1m", "retrain-no-such-dist", "pip install nothing")))
    out = cli("doctor").stdout
    assert "nothing-1m" in out and "not installed (pip install nothing)" in out
    assert json.loads(cli("doctor", "--json").stdout)["packaged_models"][1]["version"] is None
