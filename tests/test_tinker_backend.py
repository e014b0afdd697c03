"""The Tinker backend on the official SDK against a real Tinker-API server on 127.0.0.1
(skyrl-tx behind tests/txserver): `retrain` runs with backend = "tinker" whose rewards reach
metrics.jsonl; a run killed after a checkpoint and resumed logs exactly what an uninterrupted
run logs (weights and Adam state restored by the service, sampling seeds from the batch); the
final adapter is downloaded and loads with peft on the tiny model, reproducing the server's
logprobs; no file of a run holds the API key.

Tiers: one run on the service (shared by the module) and what it logs are the fast tier's
end-to-end run of this member; the crash, resume, eval and download on top of it are slow.
Every test of the session's server runs on one xdist worker, which starts it once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from txserver.runs import assert_no_key, assert_same_run, retrain, write_run
from txserver.server import API_KEY, TxServer

from retrain.io.log import read_jsonl

pytestmark = pytest.mark.xdist_group("txserver")


@pytest.fixture(scope="module")
def straight(tx_server: TxServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted run on the service: 4 steps, evaluating every 2."""
    root = tmp_path_factory.mktemp("straight")
    done = retrain(write_run(root, tx_server))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root


def test_run_trains_on_the_service(straight: Path) -> None:
    rows = read_jsonl(straight / "logs" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert any(r["mean_reward"] > 0 for r in rows) and any(r["num_datums"] > 0 for r in rows)
    trained = [r for r in rows if not r["skipped"]]
    assert trained and all(r["tinker/forward_backward_s"] > 0 and r["tinker/optim_step_s"] > 0 for r in trained)
    assert all(r["tinker/sample_s"] > 0 for r in rows)
    assert [r["step"] for r in read_jsonl(straight / "logs" / "eval.jsonl")] == [2, 4]
    assert (straight / "adapters" / "final" / "tinker_adapter.json").is_file()
    assert_no_key(straight)


@pytest.mark.slow
def test_run_trains_resumes_exactly_and_downloads_a_peft_adapter(tx_server: TxServer, straight: Path,
                                                                  tmp_path: Path) -> None:
    killed = tmp_path / "killed"
    killed.mkdir()
    rows = read_jsonl(straight / "logs" / "metrics.jsonl")

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
    assert_same_run(read_jsonl(killed / "logs" / "metrics.jsonl"), rows)
    # evaluation during training (seeded sampling from the latest weights) resumes exactly too
    evals = read_jsonl(straight / "logs" / "eval.jsonl")
    assert [r["step"] for r in evals] == [2, 4]
    assert_same_run(read_jsonl(killed / "logs" / "eval.jsonl"), evals)
    # retrain eval loads each checkpoint (its service state) and the final adapter (its
    # service weights) and reproduces the run's own final evaluation
    scored = retrain(cfg, "--run", str(killed / "logs"), "--all-checkpoints", "--json", command="eval")
    assert scored.returncode == 0, scored.stdout[-3000:] + scored.stderr[-3000:]
    table = json.loads(scored.stdout)
    assert [r["policy"] for r in table] == ["checkpoint_step_2", "checkpoint_step_4", "final"]
    assert table[-1]["mean_reward"] == table[-2]["mean_reward"] == evals[-1]["eval/mean_reward"], (table, evals)
    plain = killed / "plain"
    plain.mkdir()
    (plain / "adapter_model.safetensors").write_bytes(b"")
    refused = retrain(cfg, "--adapter", str(plain), command="eval")
    assert refused.returncode == 2 and "not built yet" in refused.stderr, refused.stderr[-2000:]

    final = killed / "adapters" / "final"
    assert_adapter_matches_server(final, tx_server)
    assert_no_key(straight, killed)


@pytest.mark.slow
def test_doctor_asks_the_service_what_it_serves(tx_server: TxServer, tmp_path: Path) -> None:
    cfg = write_run(tmp_path, tx_server, eval_every=0)
    doctor = retrain(cfg, "--json", command="doctor", timeout=300)
    assert doctor.returncode == 0, doctor.stderr[-2000:]
    service = json.loads(doctor.stdout)["backend_service"]
    assert service["answers"] and service["models"] == [str(tx_server.model)] and service["serves_model"]
    assert service["sdk"] and API_KEY not in doctor.stdout


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
    # the SDK documents a leading None for the first token (nothing predicts it); servers that
    # send one value per predicted token only are accepted too
    predicted = [x for x in remote if x is not None and x == x]
    assert len(predicted) == len(tokens) - 1, remote
    assert torch.allclose(local, torch.tensor(predicted, dtype=torch.float32), atol=2e-3), (local, remote)
