"""Bad input: exit status 2, a short message naming the culprit and the key, no traceback."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def check(res, *needles: str) -> None:  # type: ignore[no-untyped-def]
    assert res.code == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    for needle in needles:
        assert needle in res.stderr, res.stderr


CASES = {
    "malformed": ("[training]\nlr = = 1\n", ["c.toml:2: malformed TOML"]),
    "wrong_type": ("[training]\nmax_steps = 'many'\n", ["c.toml:2: [training] max_steps: 'many': expected an integer"]),
    "out_of_range": ("[training]\ntop_p = 1.5\n", ["c.toml:2: [training] top_p: 1.5 must be <= 1"]),
    "unknown_key": ("[training]\nlearning_rate = 1\n", ["[training] learning_rate: unknown key"]),
    "unknown_section": ("[trainer]\nx = 1\n", ["[trainer]: unknown section", "did you mean 'training'?"]),
    "unknown_backend": ("[backend]\nbackend = 'tinkr'\n", ["[backend] backend: unknown backend 'tinkr'", "'tinker'"]),
    "unknown_mode": ("[algorithm]\nadvantage_mode = 'maxr'\n", ["[algorithm] advantage_mode: unknown advantage_mode 'maxr'"]),
    "unknown_loss_mode": ("[training]\npolicy_loss_mode = 'ppo'\n", ["[training] policy_loss_mode: 'ppo': must be one of standard, kl_cov, clip_cov"]),
    "plugin": ("[reward]\ntype = 'not_a_module_xyz.score'\n", ["[reward] type: plugin 'not_a_module_xyz.score' does not import"]),
    "backend_option": ("[backend.options]\nliger = true\n", ["[backend.options] liger: unknown option for backend 'local'"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_config_cases(cli, tmp_path: Path, name: str) -> None:  # type: ignore[no-untyped-def]
    text, needles = CASES[name]
    (tmp_path / "c.toml").write_text(text)
    for verb in (["explain", "c.toml"], ["c.toml"]):
        check(cli(*verb), *needles)


def test_missing_file(cli) -> None:  # type: ignore[no-untyped-def]
    check(cli("nope.toml"), "nope.toml: file not found")
    check(cli("explain", "nope.toml"), "nope.toml: file not found")


def test_unreadable_file(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import os

    p = tmp_path / "c.toml"
    p.write_text("[training]\n")
    p.chmod(0)
    try:
        if os.access(p, os.R_OK):
            pytest.skip("running as a user that can read mode-0 files (root)")
        check(cli("explain", "c.toml"), "c.toml: cannot read")
    finally:
        p.chmod(0o644)


def test_directory_instead_of_file(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "d.toml").mkdir()
    check(cli("d.toml"), "d.toml: is a directory")


def test_no_config_anywhere(cli) -> None:  # type: ignore[no-untyped-def]
    check(cli(), "no config given and no retrain.toml", "retrain init")


def test_unknown_flag_and_missing_value(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "retrain.toml").write_text("")
    check(cli("--max-step", "3"), "--max-step: unknown flag (hint: did you mean --max-steps?)")
    check(cli("--lr"), "--lr: requires a value")
    check(cli("retrain.toml", "extra.toml"), "unexpected argument 'extra.toml'")


def test_several_problems_at_once(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "c.toml").write_text("[training]\nlr = -1\nbatch_size = 0\n[model]\nlora_rank = 0\n")
    res = cli("c.toml")
    check(res, "3 config problems", "lr: -1.0 must be > 0", "batch_size: 0 must be > 0", "lora_rank: 0 must be > 0")


def test_unsloth_without_a_cuda_gpu(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if importlib.util.find_spec("retrain.backends.unsloth") is None or importlib.util.find_spec("torch") is None:
        pytest.skip("needs retrain-backends-unsloth and torch installed")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    (tmp_path / "c.toml").write_text("[model]\nmodel = 'tiny'\n[data]\nsource = 'arithmetic'\n"
                                      "[backend]\nbackend = 'unsloth'\n[training]\nmax_steps = 3\n")
    check(cli("c.toml"), "the unsloth backend needs a CUDA GPU")


def test_backend_from_a_metadata_only_distribution(cli, fake_backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fake_backend((2, 0), available=False, note="retrain-backends-foo ships its metadata only")
    (tmp_path / "c.toml").write_text("[backend]\nbackend = 'foo'\n[training]\nmax_steps = 3\n")
    check(cli("c.toml"), "retrain-backends-foo ships its metadata only")


def test_backend_not_built(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "c.toml").write_text("[backend]\nbackend = 'prime_rl'\n[training]\nmax_steps = 3\n")
    check(cli("c.toml"), "PRIME-RL bridge is not built yet")


def test_backend_built_for_another_contract(cli, fake_backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from importlib import metadata

    fake_backend((3, 0))
    (tmp_path / "c.toml").write_text("[backend]\nbackend = 'foo'\n[training]\nmax_steps = 3\n")
    res = cli("c.toml")
    check(res, f"error: retrain-backends-foo 0.3.0 declares backend contract 3.0; retrain-core "
               f"{metadata.version('retrain-core')} supports backend contract 2.0 to 2.2: upgrade retrain-core")
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_log_dir_holding_a_run_is_not_overwritten(cli, fake_backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fake_backend((2, 0))  # any runnable backend: the check comes before the backend is created
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "metrics.jsonl").write_text('{"step": 0}\n')
    (tmp_path / "c.toml").write_text(f"[logging]\nlog_dir = '{logs}'\n[model]\nmodel = 'tiny'\n"
                                     "[backend]\nbackend = 'foo'\ndevices = 'cpu'\n[data]\nsource = 'arithmetic'\n")
    check(cli("c.toml"), "already holds a run", "--resume")
    assert (logs / "metrics.jsonl").read_text() == '{"step": 0}\n'


def test_campaign_and_squeeze_bad_input(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "c.toml").write_text("[campaign]\nseeds = [1]\n")
    check(cli("c.toml", "--lr", "1"), "override flags apply to single runs")
    (tmp_path / "d.toml").write_text("[campaign]\nseeds = [1]\nsummary_script = 'nope.py'\n")
    check(cli("d.toml"), "summary_script = 'nope.py': no such file")
    (tmp_path / "e.toml").write_text("[campaign]\nexecutor = 'slurm'\n")
    check(cli("e.toml"), "[campaign]", "slurm")
    (tmp_path / "s.toml").write_text("[squeeze]\nadapter_path = 'a'\n")
    check(cli("s.toml"), "a: no adapter_model.safetensors there")
    (tmp_path / "t.toml").write_text("[squeeze]\nadapter_path = 'a'\ndevice = 'cuda'\n")
    check(cli("t.toml"), "t.toml:3: [squeeze] device: squeezing on 'cuda' is not built yet")


def test_real_process_exit_code(cli_process, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "c.toml").write_text("[training]\nlr = 'fast'\n")
    check(cli_process("c.toml", cwd=tmp_path), "c.toml:2: [training] lr: 'fast': expected a number")
    res = cli_process("explain", "c.toml", cwd=tmp_path)
    check(res, "expected a number")


def test_unknown_command_option(cli) -> None:  # type: ignore[no-untyped-def]
    res = cli("backends", "--jsn")
    assert res.code == 2 and "No such option" in res.stderr


ISSUE_CONFIG = """\
[environment]
provider = "verifiers"
id = "primeintellect/gsm8k"
auto_install = true
[inference]
engine = "trtllm"
[model]
model = "tiny"
[backend]
devices = "cpu"
[data]
source = "arithmetic"
"""


@pytest.mark.parametrize("verb", [["explain"], ["trace"], []])
def test_unbuilt_keys_refused_by_explain_trace_and_run(cli, tmp_path: Path, verb: list[str]) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "c.toml").write_text(ISSUE_CONFIG)
    res = cli(*verb, "c.toml", "--prefix-caching", "false")
    check(res, "3 config problems", "[environment] auto_install: ", "[inference] engine: ",
          "--prefix-caching (command line): ")
    problems = [line for line in res.stderr.splitlines() if line.startswith("  ")]
    assert len(problems) == 3 and all("not built yet in this version" in p for p in problems), res.stderr
    assert not (tmp_path / "logs").exists()


def test_unbuilt_value_refused_at_load(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "c.toml").write_text("[inference]\nengine = 'mlx'\n")
    for verb in (["explain", "c.toml"], ["trace", "c.toml"], ["c.toml"]):
        check(cli(*verb), "c.toml:2: [inference] engine: 'mlx' is not built yet in this version",
              'engine = "pytorch"')
