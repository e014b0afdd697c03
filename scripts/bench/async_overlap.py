"""Step time against `max_async_level` with a slow sampler (JSON): does sampling ahead bring a step
down to max(sample, train)?

The in-process engine on the tiny model, with a delay injected into producing each batch: the
reward (scored on the producer's thread, so it counts as producing the batch) sleeps
`DELAYS[j % 4]` seconds over batch j, a sleep that uses no CPU, as waiting on a remote sampler
does not. The delays vary (three quick batches, one slow), as a server's batch times do, and
are sized so that producing a batch takes about as long as training on it on average: then
K = 0 pays both, K = 1 pays the slow batch's stall every fourth step, and a deeper queue
absorbs it (the quick batches are produced ahead). Each run trains `STEPS` steps; the table
leaves out the first `WARM` (the pipeline filling); per K: mean seconds per step, mean seconds
producing a batch (sampling + scoring + the delay) and training one, the ideal
max(produce, train), and step / ideal. All K run in one invocation, one after the other, so
they are measured side by side on the same machine state.

    uv run python scripts/bench/async_overlap.py [--levels 0 1 2 4 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LEVELS = (0, 1, 2, 4, 8)
STEPS = 26
WARM = 2
DELAYS = (0.0, 0.0, 0.0, 2.0)  # seconds, batch j sleeps DELAYS[j % 4]
PROFILE = {"batch_size": 8, "group_size": 8, "max_tokens": 24}

REWARD = f'''
import time

DELAYS = {DELAYS!r}
PER_BATCH = {PROFILE["batch_size"] * PROFILE["group_size"]}
calls = 0


def score(response, reference):
    """A digits reward whose batch j takes DELAYS[j % 4] seconds to score."""
    global calls
    time.sleep(DELAYS[(calls // PER_BATCH) % len(DELAYS)] / PER_BATCH)
    calls += 1
    return min(1.0, sum(ch.isdigit() for ch in response) / 4)
'''


def config(root: Path, level: int) -> Path:
    (root / "slow_reward.py").write_text(REWARD)
    training = {"seed": 0, "max_steps": STEPS, "temperature": 1.0, "top_p": 1.0, "lr": 1e-3, "save_every": 0,
                "max_async_level": level, **PROFILE}
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in training.items())
    cfg = root / f"k{level}.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
lora_rank = 8
[backend]
devices = "cpu"
adapter_path = "{root / f'k{level}' / 'adapters'}"
[training]
{lines}
[data]
source = "arithmetic"
[reward]
type = "custom"
custom_module = "slow_reward"
[logging]
log_dir = "{root / f'k{level}' / 'logs'}"
""")
    return cfg


def run(root: Path, level: int) -> dict[str, float]:
    cfg = config(root, level)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    done = subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg)], cwd=root, env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"K = {level} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (root / f"k{level}" / "logs" / "metrics.jsonl").read_text().splitlines()]
    timed = rows[WARM:]
    step = statistics.mean(r["step_time_s"] for r in timed)
    produce = statistics.mean(r["async/produce_s"] for r in timed)
    train = statistics.mean(r["train_time_s"] for r in timed)
    ideal = max(produce, train)
    out = {"max_async_level": level, "step_s": round(step, 3), "produce_s": round(produce, 3),
           "train_s": round(train, 3), "ideal_s": round(ideal, 3), "step_over_ideal": round(step / ideal, 3)}
    if level:
        out["wait_s"] = round(statistics.mean(r["async/wait_s"] for r in timed), 3)
        out["staleness_mean"] = round(statistics.mean(r["async/staleness_mean"] for r in timed), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", type=int, nargs="+", default=list(LEVELS))
    levels = parser.parse_args().levels
    table = []
    with tempfile.TemporaryDirectory(prefix="retrain-async-") as tmp:
        for level in levels:
            table.append(run(Path(tmp), level))
            print(json.dumps(table[-1]), file=sys.stderr, flush=True)  # progress: a long run keeps what it measured
    print(json.dumps({"profile": {**PROFILE, "steps": STEPS, "timed_from_step": WARM, "delays_s": list(DELAYS)},
                      "levels": table}, indent=2))


if __name__ == "__main__":
    main()
