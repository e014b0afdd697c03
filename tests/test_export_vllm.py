"""The demo's model, out of retrain and back: the README's demo run (`demo_run`, tests/conftest.py),
exported `--format hf`, served by a real `vllm serve` (the CPU build, tests/vllm_server.py), and
evaluated with `retrain eval` against that server reproduces the run's own final held-out
pass@1 within the evaluation's sampling noise; a LoRA run on the exported model, exported
`--format adapter`, is loaded by the same vLLM through `--lora-modules` and samples what
transformers with peft computes for the base plus that adapter.

The noise bound: held-out pass@1 is the mean over the N problems of c_i / n_i. The run scored
each problem with 8 samples, the server with SERVER_SAMPLES, independently, so their difference
has standard deviation sqrt(sum_i p_i (1 - p_i) (1/8 + 1/SERVER_SAMPLES)) / N, where p_i is the
problem's pass rate, estimated from the run's own per-problem results as (c_i + 1) / (8 + 2) (a
problem all 8 samples passed or failed is not taken as certain). The test allows 3 of those."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from test_export_command import export
from tiny_run import retrain
from vllm_server import API_KEY, VllmServer, start_vllm

from retrain.io.log import read_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vllm")]
SERVER_SAMPLES = 32
ADAPTER = "tuned"
PROMPTS = [[1, 4, 9, 78, 11, 86, 5], [1, 4, 7, 8, 78, 13, 86, 5], [1, 4, 15, 78, 15, 86, 5]]


def lora_run(root: Path, base: Path) -> Path:
    """A short LoRA run on the exported model (its supervised warmup moves the adapter)."""
    root.mkdir(parents=True)
    cfg = root / "lora.toml"
    cfg.write_text(f"""
[model]
model = "{base}"
lora_rank = 8
[backend]
devices = "cpu"
adapter_path = "{root / 'adapters'}"
[training]
seed = 0
max_steps = 1
batch_size = 4
group_size = 4
max_tokens = 8
sft_warmup_steps = 4
sft_batch_size = 16
sft_lr = 1e-2
sft_loss_fn = "cross_entropy"
save_every = 0
[data]
source = "arithmetic"
[reward]
type = "strict"
[logging]
log_dir = "{root / 'logs'}"
""")
    res = retrain(cfg)
    assert res.returncode == 0, res.stderr[-3000:]
    return root / "logs"


@pytest.fixture(scope="module")
def served(demo_run: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """(vLLM serving the demo's hf export with the adapter export of a LoRA run on it, the
    export, the adapter export)."""
    root = tmp_path_factory.mktemp("export-vllm")
    code, _, stderr = export(demo_run, "logs/demo", "--out", str(root / "demo-hf"), "--verify")
    assert code == 0, stderr
    logs = lora_run(root / "lora", root / "demo-hf")
    code, _, stderr = export(root, str(logs), "--format", "adapter", "--out", str(root / "adapter"))
    assert code == 0, stderr
    server = start_vllm(root / "vllm", root / "demo-hf",
                        extra=("--lora-modules", f"{ADAPTER}={root / 'adapter'}"))
    try:
        yield server, root / "demo-hf", root / "adapter"
    finally:
        server.stop()


def complete(server: VllmServer, model: str, prompt: list[int], **params: Any) -> dict[str, Any]:
    import httpx

    body = {"model": model, "prompt": prompt, "max_tokens": 8, "logprobs": 1, "return_token_ids": True, **params}
    resp = httpx.post(server.url + "/v1/completions", headers=server.headers, json=body, timeout=600)
    assert resp.status_code == 200, resp.text
    choice: dict[str, Any] = resp.json()["choices"][0]
    return choice


def scored(model: torch.nn.Module, prompt: list[int], tokens: list[int]) -> list[float]:
    """The logprob of each of `tokens` after `prompt` (float32)."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), -1)
    return [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(tokens)]


def test_vllm_loads_the_adapter_export_with_lora_modules(served: tuple[VllmServer, Path, Path]) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    server, model_dir, adapter = served
    assert ADAPTER in server.models()
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    tuned = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32),
                                      str(adapter)).eval()
    moved = 0.0
    for prompt in PROMPTS:
        greedy = complete(server, ADAPTER, prompt, temperature=0.0)
        tokens = [int(t) for t in greedy["token_ids"]]
        want, ids = [], list(prompt)
        with torch.no_grad():
            for _ in tokens:
                nxt = int(tuned(torch.tensor([ids])).logits[0, -1].argmax())
                want.append(nxt)
                ids.append(nxt)
        assert tokens == want, (prompt, tokens, want)
        sampled = complete(server, ADAPTER, prompt, temperature=1.0, seed=7)
        tokens = [int(t) for t in sampled["token_ids"]]
        theirs = sampled["logprobs"]["token_logprobs"]
        mine = scored(tuned, prompt, tokens)
        assert max(abs(a - b) for a, b in zip(mine, theirs, strict=True)) < 1e-3
        moved = max(moved, max(abs(a - b) for a, b in zip(mine, scored(base, prompt, tokens), strict=True)))
    assert moved > 1e-2  # the adapter acts: vLLM serving the base alone would fail the comparison


def noise_bound(per_problem: list[dict[str, Any]]) -> float:
    """3 standard deviations of the difference of two pass@1 estimates (the module docstring)."""
    n_run = len(per_problem[0]["rewards"])
    rates = [(sum(r >= 1.0 for r in p["rewards"]) + 1) / (n_run + 2) for p in per_problem]
    var = sum(p * (1 - p) for p in rates) * (1 / n_run + 1 / SERVER_SAMPLES)
    return 3 * math.sqrt(var) / len(per_problem)


def test_the_served_export_reproduces_the_runs_held_out_pass_at_1(
        served: tuple[VllmServer, Path, Path], demo_run: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    server, model_dir, _ = served
    final = read_jsonl(demo_run / "logs" / "demo" / "eval.jsonl")[-1]
    per_problem = read_jsonl(demo_run / "logs" / "demo" / "eval" / f"step_{final['step']}.jsonl")
    text = (demo_run / "retrain.toml").read_text()
    cfg = tmp_path / "eval.toml"
    # the demo's sampling, reward and held-out problems; the exported model, sampled by vLLM
    cfg.write_text(text.replace('model = "tiny"', f'model = "{model_dir}"\nlora_rank = 8')
                   .replace('train_full_model = true', 'train_full_model = false')
                   .replace('adapter_path = "adapters/demo"', f'adapter_path = "{tmp_path / "adapters"}"')
                   + f'\n[inference]\nengine = "vllm"\nurl = "{server.url}"\ntimeout_s = 900.0\n')
    monkeypatch.setenv("RETRAIN_INFERENCE_API_KEY", API_KEY)
    res = retrain(cfg, "eval", "--json", "--n", str(SERVER_SAMPLES))
    assert res.returncode == 0, res.stderr[-3000:]
    (row,) = json.loads(res.stdout)
    assert row["examples"] == final["eval/examples"] == len(per_problem)
    bound = noise_bound(per_problem)
    assert abs(row["pass@1"] - final["eval/pass@1"]) <= bound, (row["pass@1"], final["eval/pass@1"], bound)
    print(f"run pass@1 {final['eval/pass@1']:.3f}, served export pass@1 {row['pass@1']:.3f}, bound {bound:.3f}")
