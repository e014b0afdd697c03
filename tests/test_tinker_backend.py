"""The Tinker backend on the official SDK against a real Tinker-API server on 127.0.0.1
(skyrl-tx behind tests/txserver): `retrain` runs with backend = "tinker" whose rewards reach
metrics.jsonl; a run killed after a checkpoint and resumed logs exactly what an uninterrupted
run logs (weights and Adam state restored by the service, sampling seeds from the batch); the
final adapter is downloaded and loads with peft on the tiny model, reproducing the server's
logprobs; no file of a run holds the API key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from txserver.server import API_KEY, TxServer

from retrain.io.log import read_jsonl
from retrain.training.telemetry import WALL_CLOCK_FIELDS

pytestmark = pytest.mark.slow

REWARD = '''
def score(response, reference):
    """Variance on an untrained model: the share of digits in the response."""
    return sum(ch.isdigit() for ch in response) / max(len(response), 1)
'''


def write_run(root: Path, server: TxServer, *, url: str = "", **training: Any) -> Path:
    (root / "toy_reward.py").write_text(REWARD)
    settings = {"seed": 0, "max_steps": 4, "batch_size": 2, "group_size": 4, "max_tokens": 6, "temperature": 1.0,
                "top_p": 1.0, "lr": 1e-2, "save_every": 2, **training}
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in settings.items())
    cfg = root / "run.toml"
    cfg.write_text(f"""
[model]
model = "{server.model}"
base_url = "{url or server.url}"
lora_rank = 4
[backend]
backend = "tinker"
adapter_path = "{root / 'adapters'}"
throttle_dir = "{root / 'throttle'}"
max_concurrent = 2
[backend.options]
call_timeout_s = 90
[algorithm]
advantage_mode = "grpo"
transform_mode = "none"
[training]
{lines}
[data]
source = "arithmetic"
[reward]
type = "custom"
custom_module = "toy_reward"
[logging]
log_dir = "{root / 'logs'}"
""")
    return cfg


def retrain(cfg: Path, *args: str, crash: str = "", timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TINKER_API_KEY": API_KEY, "RETRAIN_CRASH_AT": crash}
    return subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg), *args], cwd=cfg.parent, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def deterministic(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_FIELDS and not k.startswith("tinker/")} for r in rows]


def assert_no_key(*roots: Path) -> None:
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                assert API_KEY.encode() not in path.read_bytes(), f"the API key leaked into {path}"


def test_run_trains_resumes_exactly_and_downloads_a_peft_adapter(tx_server: TxServer, tmp_path: Path) -> None:
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    straight.mkdir()
    killed.mkdir()
    done = retrain(write_run(straight, tx_server))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = read_jsonl(straight / "logs" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert any(r["mean_reward"] > 0 for r in rows) and any(r["num_datums"] > 0 for r in rows)
    trained = [r for r in rows if not r["skipped"]]
    assert trained and all(r["tinker/forward_backward_s"] > 0 and r["tinker/optim_step_s"] > 0 for r in trained)
    assert all(r["tinker/sample_s"] > 0 for r in rows)

    cfg = write_run(killed, tx_server)
    crashed = retrain(cfg, crash="after_checkpoint@1")
    assert crashed.returncode != 0
    record = json.loads((killed / "adapters" / "checkpoint_step_2" / "tinker_checkpoint.json").read_text())
    assert record["state_path"].startswith("tinker://") and record["seed"] == 0
    check = subprocess.run([sys.executable, "-m", "retrain.cli", "resume-check", str(killed / "logs"), "--json"],
                           capture_output=True, text=True, timeout=120, check=False)
    report = json.loads(check.stdout)
    assert report["ok"] and report["resume_mode"] == "exact", report
    resumed = retrain(cfg, "--resume", str(killed / "logs"))
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert deterministic(read_jsonl(killed / "logs" / "metrics.jsonl")) == deterministic(rows)

    final = killed / "adapters" / "final"
    assert_adapter_matches_server(final, tx_server)
    assert_no_key(straight, killed)


def assert_adapter_matches_server(final: Path, server: TxServer) -> None:
    """peft loads the downloaded adapter onto the tiny model (every LoRA weight matched), and
    the adapted model's logprobs are the ones the service computes with the same weights."""
    import tinker
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    config = json.loads((final / "adapter_config.json").read_text())
    assert set(config["target_modules"]) >= {"q_proj", "v_proj", "down_proj"}
    base = AutoModelForCausalLM.from_pretrained(str(server.model), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(final)).eval()
    from safetensors.torch import load_file

    saved = load_file(str(final / "adapter_model.safetensors"))
    live = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    assert len(live) == len(saved) and any(float(v.abs().sum()) > 0 for k, v in saved.items() if "lora_B" in k)

    tokens = [1, 8, 20, 9, 14, 5, 7]
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0, :-1]
    local = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(tokens[1:])[:, None])[:, 0]

    source = json.loads((final / "tinker_adapter.json").read_text())["tinker_path"]
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    try:
        sampler = service.create_sampling_client(model_path=source).result(timeout=120)
        remote = sampler.compute_logprobs(tinker.types.ModelInput.from_ints(tokens)).result(timeout=300)
    finally:
        service.close("success").result(timeout=10)
    assert torch.allclose(local, torch.tensor(remote[1:], dtype=torch.float32), atol=2e-3), (local, remote)
