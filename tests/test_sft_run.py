"""`trainer = "sft"` end to end through the real `retrain` command: full fine-tuning of `tiny`
on 256 generated arithmetic prompt/completion rows for 60 steps more than halves the loss and
writes a `from_pretrained`-loadable final model; SIGKILL mid-run followed by --resume writes
the same rows and the same final weights as the uninterrupted run; a wrong row pin is refused
naming the key before the model loads.

The runs go through the command in this process (tiny_run.retrain), the fast tier; only the
run that is SIGKILLed needs a process of its own, and that test is slow."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_run import retrain as retrain_here

from retrain.io.log import read_jsonl
from retrain.training.telemetry import WALL_CLOCK_FIELDS

STEPS = 60


def write_data(path: Path, rows: int = 256) -> Path:
    r = random.Random(0)
    lines = []
    for _ in range(rows):
        a, b = r.randint(0, 99), r.randint(0, 99)
        lines.append(json.dumps({"prompt": f"{a}+{b}=", "completion": str(a + b)}))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_run(root: Path, **training: object) -> Path:
    data = write_data(root / "sft.jsonl")
    settings = {"trainer": "sft", "sft_data_path": str(data), "seed": 0, "max_steps": STEPS, "batch_size": 16,
                "lr": 3e-3, "save_every": 20, **training}
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in settings.items())
    cfg = root / "sft.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
[backend]
devices = "cpu"
adapter_path = "{root / 'adapters'}"
[backend.options]
train_full_model = true
[training]
{lines}
[logging]
log_dir = "{root / 'logs'}"
""")
    return cfg


def retrain(cfg: Path, *args: str, crash: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RETRAIN_CRASH_AT": crash, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg), *args], cwd=cfg.parent, env=env,
                          capture_output=True, text=True, timeout=900, check=False)


def rows(root: Path) -> list[dict[str, object]]:
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_FIELDS}
            for r in read_jsonl(root / "logs" / "metrics.jsonl")]


@pytest.fixture(scope="session")
def reference(build_once) -> Path:  # type: ignore[no-untyped-def]
    """The uninterrupted run, built once per session (shared by the xdist workers)."""

    def train(root: Path) -> None:
        res = retrain_here(write_run(root))
        assert res.returncode == 0, res.stderr

    return build_once("sft-run-uninterrupted", train)


def test_sft_learns_and_writes_a_loadable_model(reference: Path) -> None:
    got = rows(reference)
    assert [r["step"] for r in got] == list(range(STEPS)) and all(r["phase"] == "sft" for r in got)
    last = sum(float(r["loss"]) for r in got[-5:]) / 5  # type: ignore[arg-type]
    assert last < 0.5 * float(got[0]["loss"]), (got[0]["loss"], last)  # type: ignore[arg-type]
    assert got[-1]["epoch"] == STEPS * 16 / 256
    assert all(r["sft/truncated_rows"] == 0 for r in got)
    for key in ("tokens", "supervised_tokens", "tokens_per_second", "supervised_tokens_per_second"):
        assert key in read_jsonl(reference / "logs" / "metrics.jsonl")[0], key

    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    final = reference / "adapters" / "final"
    model = AutoModelForCausalLM.from_pretrained(final)
    saved = load_file(final / "model.safetensors")
    state = model.state_dict()
    assert saved and all(torch.equal(state[k], v) for k, v in saved.items())
    manifest = json.loads((reference / "logs" / "sft_manifest.json").read_text())
    assert manifest["data"]["rows"] == 256 and manifest["schedule"]["order"] == "shuffle"
    assert json.loads((final / "retrain_sft_manifest.json").read_text()) == manifest
    recover = json.loads((reference / "logs" / "sft_data_recoverability.json").read_text())
    assert recover["copied"] and recover["recoverable"]
    assert (reference / "logs" / "sft_data.snapshot.jsonl").read_bytes() == (reference / "sft.jsonl").read_bytes()
    state_file = json.loads((reference / "logs" / "trainer_state.json").read_text())
    assert state_file["checkpoint_name"] == "final" and state_file["sft_step"] == STEPS - 1


@pytest.mark.slow
def test_sigkill_then_resume_is_bit_identical(reference: Path, tmp_path: Path) -> None:
    cfg = write_run(tmp_path)
    killed = retrain(cfg, crash="sft_after_step@29")  # after step 29's row, 10 steps past checkpoint 20
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(read_jsonl(tmp_path / "logs" / "metrics.jsonl")) == 30
    resumed = retrain_here(cfg, "--resume", str(tmp_path / "logs"))
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stdout + resumed.stderr
    assert rows(tmp_path) == rows(reference)
    final = "adapters/final/model.safetensors"
    assert (tmp_path / final).read_bytes() == (reference / final).read_bytes()


def test_row_pin_is_refused_by_name(tmp_path: Path) -> None:
    res = retrain_here(write_run(tmp_path, sft_data_rows=999))
    assert res.returncode == 2
    assert "sft_data_rows" in res.stderr and "999" in res.stderr and "256" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "logs").exists()
    res = retrain_here(write_run(tmp_path, sft_data_sha256="0" * 64))
    assert res.returncode == 2 and "sft_data_sha256" in res.stderr


def rl_warmup(root: Path, warmup: str, model: str = "") -> Path:
    """One RL step of the tiny model after an SFT warmup: `warmup` adds its [training] lines,
    `model` its [model] lines."""
    (root / "toy_reward.py").write_text("def score(response, reference):\n    return float('1' in response)\n")
    cfg = root / "rl.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
lora_rank = 4
{model}
[backend]
devices = "cpu"
adapter_path = "{root / 'adapters'}"
[algorithm]
advantage_mode = "grpo"
transform_mode = "none"
[training]
seed = 0
max_steps = 1
batch_size = 2
group_size = 2
max_tokens = 8
save_every = 0
{warmup}
[data]
source = "arithmetic"
[reward]
type = "custom"
custom_module = "toy_reward"
custom_function = "score"
[logging]
log_dir = "{root / 'logs'}"
""")
    return cfg


def test_rl_warmup_takes_its_rows_from_sft_data_path(tmp_path: Path) -> None:
    data = write_data(tmp_path / "sft.jsonl", rows=8)
    cfg = rl_warmup(tmp_path, f'sft_warmup_steps = 2\nsft_data_path = "{data}"\nsft_batch_order = "length_desc"\n'
                              'sft_max_tokens = 10\nsft_data_rows = 8')
    res = retrain_here(cfg)
    assert res.returncode == 0, res.stderr
    warm = [r for r in read_jsonl(tmp_path / "logs" / "metrics.jsonl") if r.get("phase") == "sft"]
    assert [r["step"] for r in warm] == [0, 1]
    # every row (prompt template + completion + EOS) has 11 to 13 tokens: the cap cuts each
    assert all(r["tokens"] == 2 * 10 and r["supervised_tokens"] > 0 and r["sft/truncated_rows"] == 2
               for r in warm), warm
    state = json.loads((tmp_path / "logs" / "trainer_state.json").read_text())
    assert state["sft_schedule"] == {"seed": 0, "rows": 8, "batch_size": 2, "order": "length_desc"}
    res = retrain(cfg, "--sft-data-rows", "9", "--log-dir", str(tmp_path / "other"))
    assert res.returncode == 2 and "sft_data_rows: expected 9" in res.stderr


def audited_warmup(root: Path, sft_max_tokens: int, claimed_max: int) -> Path:
    """An RL run whose warmup rows come with a row audit and a token audit of this data."""
    import hashlib

    from retrain.training.sft.contract import hub_snapshot, transformers_version

    def sha(raw: bytes) -> str:
        return hashlib.sha256(raw).hexdigest()

    data = write_data(root / "sft.jsonl", rows=8).read_bytes()
    revision = "b" * 40
    snapshot = hub_snapshot("tiny", revision)
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "tokenizer.json").write_text('{"chars": true}')
    (root / "audit.py").write_text("# counts tokens\n")
    audits = {
        "audit.json": {"schema": "retrain.sft_audit.v1", "status": "pass", "corpus_mode": "replacement",
                       "audited_dataset": {"sha256": sha(data), "rows": 8}},
        "tokens.json": {"schema": "project.tokens.v1", "status": "pass", "dataset": {"sha256": sha(data), "rows": 8},
                        "training_contract": {"trainer": "retrain", "model": "tiny", "sft_max_tokens": sft_max_tokens,
                                              "tokenizer_revision": revision,
                                              "transformers_version": transformers_version()},
                        "rows_over_training_cap": 0, "tokens": {"max": claimed_max},
                        "implementation": [{"path": "audit.py", "sha256": sha(b"# counts tokens\n")}],
                        "tokenizer_snapshot": [{"path": "tokenizer.json", "sha256": sha(b'{"chars": true}')}]},
    }
    pins = {}
    for name, audit in audits.items():
        (root / name).write_text(json.dumps(audit))
        pins[name] = sha((root / name).read_bytes())
    warmup = "\n".join([
        "sft_warmup_steps = 1", f'sft_data_path = "{root / "sft.jsonl"}"', f"sft_max_tokens = {sft_max_tokens}",
        f'sft_audit_path = "{root / "audit.json"}"', f'sft_audit_sha256 = "{pins["audit.json"]}"',
        f'sft_token_audit_path = "{root / "tokens.json"}"', f'sft_token_audit_sha256 = "{pins["tokens.json"]}"'])
    return rl_warmup(root, warmup, model=f'revision = "{revision}"\nlocal_files_only = true')


def test_audited_warmup_records_the_audits_and_checks_the_token_promise(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    cfg = audited_warmup(tmp_path, sft_max_tokens=20, claimed_max=13)
    traced = retrain_here(cfg, "trace")
    assert traced.returncode == 0, traced.stderr
    assert "SFT audit: " in traced.stdout and "(retrain.sft_audit.v1, sha256 " in traced.stdout
    assert "SFT token audit: " in traced.stdout and "project.tokens.v1" in traced.stdout
    res = retrain_here(cfg)
    assert res.returncode == 0, res.stderr
    sft = json.loads((tmp_path / "logs" / "run_meta.json").read_text())["sft_data"]
    assert sft["rows"] == 8 and sft["audit"]["status"] == "pass" and sft["token_audit"]["tokenizer_revision"] == "b" * 40
    assert sft["token_audit"]["checked"] == {"rows": 8, "tokens_max": 13}  # the run's own tokens: 11 to 13 each

    other = tmp_path / "capped"
    other.mkdir()
    cfg = audited_warmup(other, sft_max_tokens=10, claimed_max=10)  # the audit's claim, false for this tokenizer
    res = retrain_here(cfg)
    assert res.returncode == 2 and "the audit says no row is longer than 10 tokens" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
