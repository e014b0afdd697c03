"""Sampling through `retrain serve` versus in-process, and RL steps with and without overlap (JSON).

1. Completions/s (and generated tokens/s) at 1, 8 and 64 concurrent requests through
   `retrain serve` (HTTP + JSON + batching), against the in-process engine decoding the same
   number of prompts in one batch: the HTTP overhead as a measured number. Tiny model, one
   completion of 32 tokens per request, temperature 1.
2. Seconds per RL step of the medium profile (8 prompts x 8 completions x 32 tokens) sampling
   on that server, with `max_async_level` 0 and 1, and the overlap achieved (the share of
   sampling and scoring the trainer did not wait for). The first step is not timed.

    uv run python scripts/bench/inference_server.py
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOKENS = 32
CONCURRENCY = (1, 8, 64)
RL_STEPS = 4
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}


def start_server(root: Path) -> tuple[subprocess.Popen[str], str]:
    cfg = root / "serve.toml"
    cfg.write_text(f'[model]\nmodel = "tiny"\nlora_rank = 4\n[backend]\ndevices = "cpu"\n'
                   f'adapter_path = "{root / "adapters"}"\n[training]\nseed = 0\n')
    proc = subprocess.Popen([sys.executable, "-m", "retrain.cli", "serve", str(cfg), "--port", "0",
                             "--adapter-root", str(root)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=ENV)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"(http://127\.0\.0\.1:\d+)/v1", line)
    if not match:
        proc.kill()
        raise SystemExit(f"retrain serve did not start: {line!r}")
    return proc, match.group(1)


def prompts(n: int) -> list[list[int]]:
    from retrain.backends.tokenizer import HFTokenizer
    from retrain.models.load import ModelSpec, load_tokenizer

    tok = HFTokenizer(load_tokenizer(ModelSpec("tiny")))
    return [tok.encode_prompt(f"{i}+{2 * i}=") for i in range(n)]


async def through_server(url: str, concurrency: int, total: int) -> dict[str, float]:
    import httpx

    batch = prompts(concurrency)
    body = {"model": "tiny", "max_tokens": TOKENS, "temperature": 1.0, "logprobs": 1, "n": 1}
    tokens = 0
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=httpx.Limits(max_connections=concurrency)) as c:
        await c.post("/v1/completions", json={**body, "prompt": batch[0]})  # warm-up
        t0 = time.perf_counter()
        for _ in range(total // concurrency):
            answers = await asyncio.gather(*[c.post("/v1/completions", json={**body, "prompt": p, "seed": i})
                                             for i, p in enumerate(batch)])
            tokens += sum(a.json()["usage"]["completion_tokens"] for a in answers)
        elapsed = time.perf_counter() - t0
    return {"completions_per_s": round(total / elapsed, 2), "tokens_per_s": round(tokens / elapsed, 1)}


def in_process(concurrency: int, total: int) -> dict[str, float]:
    import torch

    from retrain.backends.tokenizer import HFTokenizer
    from retrain.inference_engine.pytorch.sample import generate
    from retrain.models.load import ModelSpec, load_model, load_tokenizer
    from retrain.types import SamplingParams

    model = load_model(ModelSpec("tiny"), seed=0).eval()
    tok = HFTokenizer(load_tokenizer(ModelSpec("tiny")))
    batch, params = prompts(concurrency), SamplingParams(max_tokens=TOKENS, temperature=1.0)
    g = torch.Generator().manual_seed(0)
    generate(model, batch[:1], 1, params, tok.eos_token_ids, tok.pad_token_id, g)
    tokens = 0
    t0 = time.perf_counter()
    for _ in range(total // concurrency):
        out = generate(model, batch, 1, params, tok.eos_token_ids, tok.pad_token_id, g)
        tokens += sum(len(c.token_ids) for group in out for c in group)
    elapsed = time.perf_counter() - t0
    return {"completions_per_s": round(total / elapsed, 2), "tokens_per_s": round(tokens / elapsed, 1)}


def rl_steps(url: str, root: Path, level: int) -> dict[str, float]:
    run = root / f"rl_async{level}"
    run.mkdir()
    # a reward with variance on an untrained model, so every step trains
    (run / "toy_reward.py").write_text("def score(response, reference):\n"
                                       "    return float(sum(ch.isdigit() for ch in response) >= 2)\n")
    cfg = run / "run.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
lora_rank = 4
[backend]
devices = "cpu"
adapter_path = "{run / 'adapters'}"
[algorithm]
advantage_mode = "grpo"
transform_mode = "none"
[training]
seed = 0
max_steps = {RL_STEPS}
batch_size = 8
group_size = 8
max_tokens = {TOKENS}
temperature = 1.0
top_p = 1.0
lr = 1e-3
save_every = 0
max_async_level = {level}
[inference]
engine = "vllm"
url = "{url}"
[data]
source = "arithmetic"
[reward]
type = "custom"
custom_module = "toy_reward"
custom_function = "score"
[logging]
log_dir = "{run / 'logs'}"
log_generations = false
""")
    res = subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg)], cwd=run, env=ENV, capture_output=True,
                         text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"the RL run failed: {res.stderr[-2000:]}")
    rows = [json.loads(line) for line in (run / "logs" / "metrics.jsonl").read_text().splitlines()][1:]
    trained = sum(1 for r in rows if not r["skipped"])
    out = {"s_per_step": round(statistics.mean(r["step_time_s"] for r in rows), 3),
           "sample_s_per_step": round(statistics.mean(r["sample_time_s"] for r in rows), 3),
           "train_s_per_step": round(statistics.mean(r["train_time_s"] for r in rows), 3),
           "timed_steps": len(rows), "steps_that_trained": trained}
    if level:
        out["overlap"] = round(statistics.mean(r["async/overlap"] for r in rows), 3)
        out["wait_s_per_step"] = round(statistics.mean(r["async/wait_s"] for r in rows), 3)
    return out


def main() -> None:
    import torch

    torch.set_num_threads(int(ENV["OMP_NUM_THREADS"]))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        proc, url = start_server(root)
        try:
            sampling = {}
            for c in CONCURRENCY:
                total = max(64, c)
                served = asyncio.run(through_server(url, c, total))
                local = in_process(c, total)
                sampling[str(c)] = {"serve": served, "in_process": local,
                                    "http_overhead": round(local["completions_per_s"] / served["completions_per_s"], 2)}
            steps = {f"max_async_level_{level}": rl_steps(url, root, level) for level in (0, 1)}
        finally:
            proc.kill()
            proc.wait()
    print(json.dumps({"model": "tiny", "tokens_per_completion": TOKENS, "threads": int(ENV["OMP_NUM_THREADS"]),
                      "completions_per_s_by_concurrency": sampling,
                      "rl_medium_64x32_on_retrain_serve": steps}, indent=2))


if __name__ == "__main__":
    main()
