"""`retrain export` on the fast tier's uninterrupted run (tests/test_training_run.py: tiny, LoRA,
six RL steps), through the real command in this process: the run's closing summary prints the
command, which writes a transformers folder that loads offline and equals tiny plus the final
adapter; `--format gguf --verify` reads its GGUF back; `--checkpoint` picks a checkpoint; bad
input is one line naming the culprit, exit status 2, with nothing written or replaced."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from pathlib import Path

import pytest
import torch
from test_training_run import retrain, write_run

from retrain.backends.export import EXPORT_RECORD


@pytest.fixture(scope="session")
def run_root(build_once) -> Path:  # type: ignore[no-untyped-def]
    """The uninterrupted run test_training_run.py builds (the same name, so built once)."""

    def train(root: Path) -> None:
        res = retrain(write_run(root))
        (root / "stdout.log").write_text(res.stdout)
        assert res.returncode == 0, res.stderr

    return Path(build_once("training-run-uninterrupted", train))


def export(cwd: Path, *args: str) -> tuple[int, str, str]:
    """`retrain export ARGS` in this process, from `cwd`: (exit status, stdout, stderr)."""
    import os

    from retrain.cli import main

    out, err, code, here = io.StringIO(), io.StringIO(), 0, os.getcwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(["export", *args])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


def tiny_with(adapter: Path) -> torch.nn.Module:
    from peft import PeftModel

    from retrain.models.load import ModelSpec, load_model

    return PeftModel.from_pretrained(load_model(ModelSpec("tiny"), seed=0), str(adapter)).eval()


def test_the_summary_prints_the_export_command_and_it_writes_what_transformers_loads(
        run_root: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    (line,) = [x for x in (run_root / "stdout.log").read_text().splitlines() if "export it:" in x]
    command = shlex.split(line.split("export it:", 1)[1].split("  (", 1)[0])
    assert command == ["retrain", "export", str(run_root / "logs"), "--out", "exports/logs"]
    code, stdout, stderr = export(tmp_path, *command[2:])
    assert code == 0, stderr
    out = tmp_path / "exports" / "logs"
    assert f"as hf to {Path('exports/logs')}" in stdout and "load it: AutoModelForCausalLM" in stdout
    exported = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32, local_files_only=True).eval()
    ids = torch.tensor([[1, 4, 9, 78, 11, 86, 5]])
    with torch.no_grad():
        torch.testing.assert_close(exported(ids).logits, tiny_with(run_root / "adapters" / "final")(ids).logits,
                                   rtol=0, atol=1e-4)
    tokenizer = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    assert tokenizer.apply_chat_template([{"role": "user", "content": "3+5="}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False) == ids[0].tolist()
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == 2
    record = json.loads((out / EXPORT_RECORD).read_text())
    assert record["source"]["checkpoint"] == "final" and record["source"]["rl_steps"] == 6
    assert record["base_model"] == {"name": "tiny", "revision": "", "seed": 0} and record["lora"] is True


@pytest.mark.parametrize("gguf_type", ["f16", "q8_0"])
def test_gguf_with_verify_reads_the_file_back(gguf_type: str, run_root: Path, tmp_path: Path) -> None:
    code, stdout, stderr = export(tmp_path, str(run_root / "logs"), "--out", "gguf", "--format", "gguf",
                                  "--gguf-type", gguf_type, "--verify", "--json")
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["files"] == [f"model-{gguf_type}.gguf", EXPORT_RECORD]
    (check,) = [n for n in report["notes"] if n.startswith("read back by")]
    assert "tokenizer agrees" in check and "greedy tokens 12/12 alike" in check
    record = json.loads((tmp_path / "gguf" / EXPORT_RECORD).read_text())
    assert record["read_back"]["max_logit_diff"] < (3e-3 if gguf_type == "f16" else 5e-2)


def test_a_checkpoint_of_the_run(run_root: Path, tmp_path: Path) -> None:
    code, _, stderr = export(tmp_path, str(run_root / "logs"), "--checkpoint", "checkpoint_step_2", "--out", "step2")
    assert code == 0, stderr
    record = json.loads((tmp_path / "step2" / EXPORT_RECORD).read_text())
    assert record["source"]["checkpoint"] == "checkpoint_step_2" and record["source"]["run"] == str(run_root / "logs")
    code, _, stderr = export(tmp_path, str(run_root / "adapters" / "checkpoint_step_4"), "--out", "step4")
    assert code == 0, stderr  # the checkpoint folder alone: its checkpoint.json records tiny's seed
    assert json.loads((tmp_path / "step4" / EXPORT_RECORD).read_text())["base_model"]["seed"] == 0


def test_bad_input_is_one_line_and_writes_nothing(run_root: Path, tmp_path: Path) -> None:
    logs, final = str(run_root / "logs"), run_root / "adapters" / "final"
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    cases = {
        ("nowhere", "--out", "x"): "error: nowhere: no such folder",
        (str(run_root / "logs" / "eval"), "--out", "x"): f"error: {run_root / 'logs' / 'eval'} is not a run folder",
        (logs, "--out", "x", "--format", "onnx"): "error: --format 'onnx' is not one of hf, adapter, gguf",
        (logs, "--out", "taken"): "error: --out taken exists",
        (logs, "--out", "x", "--format", "adapter"): "error: --format adapter: the adapter's base is the built-in 'tiny'",
        (logs, "--out", "x", "--gguf-type", "q8_0"): "error: --gguf-type q8_0 applies to --format gguf, not hf",
        (logs, "--out", str(final / "inside")): f"error: --out {final / 'inside'} overlaps the weights it exports",
        (logs, "--out", "x", "--checkpoint", "checkpoint_step_9"): "error: --checkpoint checkpoint_step_9: no such folder",
        (str(final), "--out", "x"): f"error: {final}: the base model these weights were trained on is not recorded",
    }
    for args, first in cases.items():
        code, stdout, stderr = export(tmp_path, *args)
        lines = stderr.strip().splitlines()
        assert code == 2 and lines[0].startswith(first), (args, stderr)
        assert len(lines) <= 2 and all(x.startswith("  hint: ") for x in lines[1:]), stderr
        assert "Traceback" not in stderr and not stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["keep.txt"]
    assert not (final / "inside").exists()


def test_the_summary_offers_export_only_where_the_backend_writes_one() -> None:
    from retrain.training.console import summary_lines
    from retrain.training.export_command import export_command
    from retrain.validation.load import load_config

    def config(backend: str):  # type: ignore[no-untyped-def]
        return load_config(None, ["--backend", backend, "--log-dir", "logs/my run"], import_plugins=False).config

    assert export_command(config("local")) == "retrain export 'logs/my run' --out 'exports/my run'"
    assert export_command(config("tinker")) is None  # its checkpoints are records of weights on the service
    lines = summary_lines({"steps": 1, "final_adapter": "a/final", "log_dir": "logs/x", "export_command": "retrain x"})
    assert lines[-1] == "  export it: retrain x  (docs/export.md: --format gguf, adapter)"
    assert not any("export" in line for line in summary_lines({"steps": 1, "log_dir": "logs/x"}))
