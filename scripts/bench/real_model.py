"""retrain against TRL's GRPOTrainer on a real pretrained model, SmolLM2-135M-Instruct (the
`smollm2` extra), side by side in one run: reward per step, s/step and peak RSS, as one JSON
object.

    uv run python scripts/bench/real_model.py
    BENCH_SEEDS=3 BENCH_STEPS=12 uv run python scripts/bench/real_model.py

Environment: BENCH_STEPS (default 12), BENCH_SEEDS (default 3: seeds s..s+n-1 from
BENCH_FIRST_SEED, default 1), BENCH_DIFFICULTY (digits per operand, default 1), BENCH_THREADS
(torch threads of each run, default 2), BENCH_REF_TREE (another checkout of retrain with its own
synced .venv, e.g. a `make bench-compare` tree: per seed its retrain runs too, right after this
one's, so a change is measured against TRL and against the commit before it in one run).

The task is the RL stage of examples/smollm2-arithmetic.toml, from the base model (no format
warmup: TRL's GRPOTrainer has none): 8 prompts x 4 completions of at most 16 tokens, LoRA r16
(alpha 32) on every linear layer of the blocks, lr 1e-4 constant, AdamW (0.9, 0.999), the
token-mean loss, group-mean advantages, temperature 1, the partial-credit reward. Both trainers
load the same converted model folder and read the same JSONL of problems, rendered as the
same chat turns (retrain's system prompt asking for \\boxed{}, "What is a + b?"), and score
with the same code (retrain/rewards/boxed.py). The comparison is paired: per seed, TRL reads the
problems in the order retrain walks them for that seed (its training problems, shuffled by the
seed; TRL's own shuffle off), so step k of both trainers asks the same 8 questions and what
differs between them is the sampling and the trainer. Per seed TRL runs first, then retrain, so a
change in the machine's load hits both alike. `last_third` is each run's mean reward over its
last third of the steps. Without the model or a TRL environment it prints `{"skipped": reason}`.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PEER = Path(__file__).resolve().parents[1] / "peer"
sys.path.insert(0, str(PEER))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import trl_env  # noqa: E402
from support.smollm2_peer import smollm2_beside_trl  # noqa: E402
from trl_learning import run  # noqa: E402

PROMPTS, GROUP, MAX_TOKENS, LR, RANK = 8, 4, 16, 1e-4, 16
PROBLEMS = 512


def write_problems(path: Path, difficulty: int) -> None:
    """The problems as the chat turns retrain renders for its `arithmetic` task."""
    from retrain.data.chat import SYSTEM, question
    from retrain.types import Example

    rng = random.Random(0)
    top = 10 ** difficulty - 1
    lines = []
    for _ in range(PROBLEMS):
        a, b = rng.randint(0, top), rng.randint(0, top)
        asked = question(Example(prompt=f"{a}+{b}=", reference=str(a + b), task="arithmetic"))
        lines.append(json.dumps({"system": SYSTEM, "prompt": asked, "reference": str(a + b)}))
    path.write_text("\n".join(lines) + "\n")


def in_retrains_order(data: Path, seed: int, out: Path) -> None:
    """The problems retrain trains on for `seed`, written in the order it walks them."""
    from retrain.config.schema import TrainConfig
    from retrain.data.math import load_math

    config = TrainConfig()
    config.data.path, config.training.seed = str(data), seed
    by_prompt = {json.loads(line)["prompt"]: line for line in data.read_text().splitlines() if line.strip()}
    out.write_text("".join(by_prompt[ex.prompt] + "\n" for ex in load_math(config)))


def last_third(rewards: list[float], steps: int) -> float:
    tail = rewards[steps - max(1, steps // 3):steps]
    return statistics.fmean(tail)


def summarise(runs: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    return {
        "reward_per_step": [round(statistics.fmean(r["rewards"][i] for r in runs), 4) for i in range(steps)],
        "last_third": [round(last_third(r["rewards"], steps), 4) for r in runs],
        "last_third_mean": round(statistics.fmean(last_third(r["rewards"], steps) for r in runs), 4),
        "s_per_step": round(statistics.fmean(sum(r["step_times"][:steps]) / steps for r in runs), 2),
        "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs)),
    }


def main() -> None:
    steps = int(os.environ.get("BENCH_STEPS", "12"))
    first = int(os.environ.get("BENCH_FIRST_SEED", "1"))
    seeds = range(first, first + int(os.environ.get("BENCH_SEEDS", "3")))
    difficulty = int(os.environ.get("BENCH_DIFFICULTY", "1"))
    threads = int(os.environ.get("BENCH_THREADS", "2"))
    found = smollm2_beside_trl()
    if found is None:
        return
    model, python = found
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="bench-real-"))
    data = root / "problems.jsonl"
    write_problems(data, difficulty)
    import retrain.rewards.boxed as boxed_module  # the very reward code retrain scores with

    boxed = Path(boxed_module.__file__ or "")
    sets = [f"model.lora_rank={RANK}", f"lora.alpha={2 * RANK}", f"training.batch_size={PROMPTS}",
            f"training.group_size={GROUP}", f"training.max_tokens={MAX_TOKENS}", f"training.lr={LR}",
            'data.source="math"', f"data.path={json.dumps(str(data))}", 'reward.type="partial"']
    out: dict[str, Any] = {"model": "smollm2-135m-instruct", "steps": steps, "seeds": list(seeds),
                           "difficulty": difficulty, "torch_threads": threads,
                           "shape": {"prompts": PROMPTS, "group": GROUP, "max_tokens": MAX_TOKENS, "lr": LR,
                                     "lora_rank": RANK},
                           "order": "per seed: TRL, then retrain, then the reference tree's retrain (BENCH_REF_TREE)", "paired": "same problems per step", "load_average_start": os.getloadavg(),
                           "versions": trl_env.pins()}
    trl_runs, ours, theirs = [], [], []
    ref = Path(os.environ["BENCH_REF_TREE"]).resolve() if os.environ.get("BENCH_REF_TREE") else None
    for seed in seeds:
        print(f"== seed {seed}: trl", file=sys.stderr, flush=True)
        ordered = root / f"problems-seed{seed}.jsonl"
        in_retrains_order(data, seed, ordered)
        trl_runs.append(run([str(python), str(PEER / "real_trl.py"), "--model", str(model), "--data", str(ordered),
                             "--in-order",
                             "--boxed", str(boxed), "--seed", str(seed), "--steps", str(steps),
                             "--prompts", str(PROMPTS), "--group", str(GROUP), "--max-tokens", str(MAX_TOKENS),
                             "--lr", str(LR), "--rank", str(RANK)], threads))
        print(f"== seed {seed}: retrain", file=sys.stderr, flush=True)
        ours.append(run([sys.executable, str(PEER / "retrain_train.py"), "--model", str(model), "--seed", str(seed),
                         "--steps", str(steps), *(a for s in sets for a in ("--set", s))], threads))
        if ref is not None:
            print(f"== seed {seed}: retrain at {ref.name}", file=sys.stderr, flush=True)
            theirs.append(run([str(ref / ".venv" / "bin" / "python"), str(ref / "scripts" / "peer" / "retrain_train.py"),
                               "--model", str(model), "--seed", str(seed), "--steps", str(steps),
                               *(a for s in sets for a in ("--set", s))], threads))
    out["trl"], out["retrain"] = summarise(trl_runs, steps), summarise(ours, steps)
    out["retrain_over_trl_s_per_step"] = round(out["retrain"]["s_per_step"] / out["trl"]["s_per_step"], 3)
    out["runs"] = {"trl": trl_runs, "retrain": ours}
    if ref is not None:
        out["ref_tree"] = str(ref)
        out["retrain_ref"] = summarise(theirs, steps)
        out["retrain_ref_over_trl_s_per_step"] = round(out["retrain_ref"]["s_per_step"] / out["trl"]["s_per_step"], 3)
        out["runs"]["retrain_ref"] = theirs
    out["load_average_end"] = os.getloadavg()
    out["bench_wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
