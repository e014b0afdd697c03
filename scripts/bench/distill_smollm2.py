"""retrain's on-policy distillation against TRL's GKDTrainer (lmbda = 1, beta = 1: on-policy
reverse KL) on SmolLM2-135M-Instruct (the `smollm2` extra), paired per seed in one run: s/step
and held-out pass@1, as one JSON object.

    uv run python scripts/bench/distill_smollm2.py
    BENCH_SEEDS=3 BENCH_STEPS=20 uv run python scripts/bench/distill_smollm2.py

The teacher is SmolLM2 with an RL-trained LoRA adapter merged in: retrain trains it here first
on single-digit sums (seed 1, a 10-step supervised warmup for the \\boxed{} form, then
BENCH_TEACHER_STEPS GRPO steps, default 10, `partial` reward), merges it and saves the merged
model with its tokenizer; BENCH_TEACHER names such a folder instead. The student is the base
model. Per seed both trainers distil BENCH_STEPS steps (default 20) of 8 prompts x 1 completion
of at most 16 tokens, temperature 1, LoRA r16 (alpha 32) on every linear layer of the blocks,
lr BENCH_LR (default 1e-4) constant, AdamW (0.9, 0.999, 1e-8), no clipping, the same merged
teacher in float32. retrain: `[teacher] reward_coef = 0, kl_coef = 1` (the sampled reverse KL as
the advantage); TRL: `GKDTrainer(lmbda = 1, beta = 1)` (the full-vocabulary reverse KL at each
sampled position). The problems are the built-in arithmetic's for the seed, in the order retrain
walks them, rendered as the same chat turns; TRL reads them in that order, so step k of both asks
the same 8 questions. Per seed TRL runs first, then retrain, so a change in the machine's load hits
both alike. Held-out pass@1: `retrain eval` of each side's final adapter on the seed's held-out
sums (4 samples each, 16 tokens), the same evaluator for both; `base_pass1` is the base model's.
s/step: TRL's from its trainer callbacks (training start to each optimizer step), retrain's its
rows' `step_time_s` (sampling, the teacher, the update); both include every step.
Without the model or a TRL environment it prints `{"skipped": reason}`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PEER = Path(__file__).resolve().parents[1] / "peer"
sys.path.insert(0, str(PEER))

import trl_env  # noqa: E402
from support.smollm2_peer import smollm2_beside_trl  # noqa: E402

PROMPTS, MAX_TOKENS, RANK, DIFFICULTY = 8, 16, 16, 1


def env_of(threads: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def toml_text(tables: dict[str, dict[str, Any]]) -> str:
    return "".join(f"[{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())
                   for name, values in tables.items())


def config(folder: Path, model: Path, seed: int, steps: int, lr: float, *, teacher: Path | None = None,
           warmup: int = 0) -> Path:
    tables: dict[str, dict[str, Any]] = {
        "model": {"model": str(model), "lora_rank": RANK},
        "lora": {"alpha": 2 * RANK, "dropout": 0.0},
        "backend": {"backend": "local", "devices": "cpu", "adapter_path": str(folder / "adapters")},
        "algorithm": {"advantage_mode": "grpo", "transform_mode": "none"},
        "optimizer": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "grad_clip_norm": 0.0},
        "training": {"seed": seed, "max_steps": steps, "batch_size": PROMPTS, "group_size": 1 if teacher else 4,
                     "max_tokens": MAX_TOKENS, "temperature": 1.0, "top_p": 1.0, "lr": lr, "weight_decay": 0.0,
                     "save_every": steps, "sft_warmup_steps": warmup, "sft_batch_size": 16, "sft_lr": 1e-3,
                     "sft_loss_fn": "cross_entropy"},
        "data": {"source": "arithmetic", "difficulty": DIFFICULTY},
        "reward": {"type": "partial"},
        "eval": {"at_end": True, "k": 4, "max_tokens": MAX_TOKENS},
        "logging": {"log_dir": str(folder / "logs")},
    }
    if teacher is not None:
        tables["teacher"] = {"model": str(teacher), "kl_coef": 1.0, "reward_coef": 0.0}
    if not warmup:
        for key in ("sft_warmup_steps", "sft_batch_size", "sft_lr", "sft_loss_fn"):
            del tables["training"][key]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.toml"
    path.write_text(toml_text(tables))
    return path


def retrain(cfg: Path, env: dict[str, str]) -> None:
    """Train `cfg`, resuming the run its log directory holds when an earlier call was stopped."""
    logs = cfg.parent / "logs"
    resume = ["--resume", str(logs)] if (logs / "trainer_state.json").is_file() else []
    with (cfg.parent / "stdout.log").open("a") as out:
        subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg), *resume], cwd=cfg.parent, env=env, stdout=out,
                       stderr=subprocess.STDOUT, check=True)


def held_out_pass1(cfg: Path, env: dict[str, str], adapter: Path | None) -> float:
    extra = ["--adapter", str(adapter)] if adapter is not None else []
    done = subprocess.run([sys.executable, "-m", "retrain.cli", "eval", str(cfg), *extra, "--json"], cwd=cfg.parent,
                          env=env, capture_output=True, text=True, check=True)
    (row,) = json.loads(done.stdout)
    return float(row["pass@1"])


def merged_teacher(root: Path, model: Path, env: dict[str, str], steps: int) -> tuple[Path, float]:
    """SmolLM2 with a retrain-trained RL adapter merged in, saved with its tokenizer; its pass@1."""
    given = os.environ.get("BENCH_TEACHER")
    folder = root / "teacher"
    merged = Path(given).resolve() if given else folder / "merged"
    cfg = config(folder, model, 1, steps, 1e-4, warmup=10)
    if not merged.is_dir():
        retrain(cfg, env)
        code = ("import sys, torch; from peft import PeftModel; "
                "from transformers import AutoModelForCausalLM, AutoTokenizer; "
                "base = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32); "
                "PeftModel.from_pretrained(base, sys.argv[2]).merge_and_unload().save_pretrained(sys.argv[3]); "
                "AutoTokenizer.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[3])")
        subprocess.run([sys.executable, "-c", code, str(model), str(folder / "adapters" / "final"), str(merged)],
                       env=env, check=True, capture_output=True)
    return merged, held_out_pass1(config(root / "teacher-eval", merged, 1, 1, 1e-4), env, None)


def problems_in_order(path: Path, seed: int, count: int) -> None:
    """The problems retrain trains on for `seed`, in the order its cursor walks them, as chat turns."""
    from retrain.data.arithmetic import arithmetic_examples
    from retrain.data.chat import SYSTEM, question

    examples = arithmetic_examples(DIFFICULTY, seed)
    rows = [examples[i % len(examples)] for i in range(count)]
    path.write_text("".join(json.dumps({"system": SYSTEM, "prompt": question(ex), "reference": ex.reference}) + "\n"
                            for ex in rows))


def paired_seed(folder: Path, python: Path, model: Path, teacher: Path, seed: int, steps: int, lr: float,
                env: dict[str, str]) -> dict[str, Any]:
    """TRL's GKD, then retrain's distillation, on the seed's problems: their s/step and pass@1."""
    data = folder / "problems.jsonl"
    problems_in_order(data, seed, steps * PROMPTS)
    print(f"== seed {seed}: trl", file=sys.stderr, flush=True)
    done = subprocess.run([str(python), str(PEER / "trl_gkd.py"), "--model", str(model), "--teacher", str(teacher),
                           "--data", str(data), "--seed", str(seed), "--steps", str(steps), "--prompts", str(PROMPTS),
                           "--max-tokens", str(MAX_TOKENS), "--lr", str(lr), "--rank", str(RANK),
                           "--out", str(folder / "trl-adapter")], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"trl_gkd.py failed:\n{done.stderr[-3000:]}")
    trl = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"== seed {seed}: retrain", file=sys.stderr, flush=True)
    cfg = config(folder / "retrain", model, seed, steps, lr, teacher=teacher)
    retrain(cfg, env)
    rows = [json.loads(line) for line in (folder / "retrain" / "logs" / "metrics.jsonl").read_text().splitlines()]
    ours = [r["step_time_s"] for r in rows]
    return {
        "seed": seed,
        "base_pass1": held_out_pass1(cfg, env, None),
        "trl": {"s_per_step": round(statistics.fmean(trl["step_times"]), 2),
                "pass1": held_out_pass1(cfg, env, folder / "trl-adapter"), "peak_rss_mb": round(trl["peak_rss_mb"]),
                "loss_first_last": [round(trl["losses"][0], 4), round(trl["losses"][-1], 4)]},
        "retrain": {"s_per_step": round(statistics.fmean(ours), 2),
                    "pass1": held_out_pass1(cfg, env, folder / "retrain" / "adapters" / "final"),
                    "peak_rss_mb": round(max(r["process_max_rss_mb"] for r in rows)),
                    "teacher_kl_first_last": [round(rows[0]["teacher/kl"], 4), round(rows[-1]["teacher/kl"], 4)],
                    "teacher_time_s": round(statistics.fmean(r["teacher/time_s"] for r in rows), 3)},
    }


def main() -> None:
    steps = int(os.environ.get("BENCH_STEPS", "20"))
    first = int(os.environ.get("BENCH_FIRST_SEED", "1"))
    seeds = range(first, first + int(os.environ.get("BENCH_SEEDS", "3")))
    threads = int(os.environ.get("BENCH_THREADS", "2"))
    lr = float(os.environ.get("BENCH_LR", "1e-4"))
    found = smollm2_beside_trl()
    if found is None:
        return
    model, python = found
    started = time.perf_counter()
    root = Path(os.environ.get("BENCH_ROOT") or tempfile.mkdtemp(prefix="bench-distill-smollm2-"))
    env = env_of(threads)
    teacher, teacher_pass1 = merged_teacher(root, model, env, int(os.environ.get("BENCH_TEACHER_STEPS", "10")))
    runs: list[dict[str, Any]] = []
    for seed in seeds:
        folder = root / f"seed{seed}"
        result = folder / "result.json"  # a seed done by an earlier, stopped call is not run again
        if not result.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            result.write_text(json.dumps(paired_seed(folder, python, model, teacher, seed, steps, lr, env)))
        runs.append(json.loads(result.read_text()))
    trl_s = statistics.fmean(r["trl"]["s_per_step"] for r in runs)
    ours_s = statistics.fmean(r["retrain"]["s_per_step"] for r in runs)
    print(json.dumps({
        "model": "smollm2-135m-instruct", "teacher": str(teacher), "teacher_pass1": teacher_pass1, "steps": steps,
        "shape": {"prompts": PROMPTS, "completions_per_prompt": 1, "max_tokens": MAX_TOKENS, "lr": lr,
                  "lora_rank": RANK, "difficulty": DIFFICULTY},
        "torch_threads": threads, "versions": trl_env.pins(), "runs": runs,
        "trl_s_per_step": round(trl_s, 2), "retrain_s_per_step": round(ours_s, 2),
        "retrain_over_trl_s_per_step": round(ours_s / trl_s, 3),
        "pass1_mean": {"base": round(statistics.fmean(r["base_pass1"] for r in runs), 3),
                       "trl": round(statistics.fmean(r["trl"]["pass1"] for r in runs), 3),
                       "retrain": round(statistics.fmean(r["retrain"]["pass1"] for r in runs), 3)},
        "load_average": os.getloadavg(), "root": str(root), "bench_wall_s": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
