"""On-policy distillation against RL from the same start, on the demo (`retrain.toml`: the tiny
model, single-digit addition, 60 warmup steps then MaxRL), paired per seed, as one JSON object.

    uv run python scripts/bench/distill.py
    BENCH_TEACHER=adapters/demo/final BENCH_SEEDS=3 uv run python scripts/bench/distill.py

The teacher is the demo's RL-trained policy: BENCH_TEACHER names its weights (a
`train_full_model` run's adapter folder); unset, the demo is trained here first for
BENCH_TEACHER_STEPS RL steps (default 800) and its final weights are the teacher. Per seed
both arms run the demo's config with that seed, so they start from the very same warmup
(deterministic): `rl` as the demo trains (16 prompts x 8 completions), `distill` with `[teacher]
model = "tiny"`, `adapter` = the teacher, `reward_coef = 0` (pure distillation), `kl_coef = 1`,
BENCH_DISTILL_GROUP completions per prompt (default 1: no group baseline is needed, so 128
prompts x 1), so both sample the same 128 completions a step at temperature 1, and lr
BENCH_DISTILL_LR (default 1e-3; RL keeps the demo's 3e-4), the same optimizer otherwise. Held-out
pass@1 (8 samples on each of the 16 held-out sums) is measured before RL and every
BENCH_EVAL_EVERY RL steps (default 10); an arm stops (Ctrl-C: it saves and exits) at the first
evaluation with pass@1 >= BENCH_TARGET (default 0.8), or after BENCH_STEPS RL steps (default
600). Per run: the RL steps to the target, the wall time of those steps (their step_time_s:
sampling, the teacher's scoring, training; evaluation excluded), pass@1 before RL and at the
last evaluation, s/step. The arms of a seed run one after the other, alternating which goes
first, so the machine's load hits both alike. BENCH_THREADS: torch threads per run (default 1),
BENCH_FIRST_SEED (default 1), BENCH_ROOT: where runs are written (default a temporary folder).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "retrain.toml"


def toml_text(table: dict[str, Any]) -> str:
    lines: list[str] = []
    for section, values in table.items():
        scalars = {k: v for k, v in values.items() if not isinstance(v, dict)}
        lines.append(f"[{section}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in scalars.items()]
        for sub, inner in values.items():
            if isinstance(inner, dict):
                lines.append(f"[{section}.{sub}]")
                lines += [f"{k} = {json.dumps(v)}" for k, v in inner.items()]
    return "\n".join(lines) + "\n"


def demo_config(folder: Path, *, seed: int, steps: int, eval_every: int, teacher: Path | None,
                group: int = 0, lr: float = 0.0) -> Path:
    """The demo with `seed`; with `teacher`, distilling from it, `group` completions per prompt
    and as many more prompts as keep the completions per step the demo's, at `lr` (0: the demo's)."""
    config = tomllib.loads(DEMO.read_text())
    config["training"].update({"seed": seed, "max_steps": steps, "save_every": steps})
    if teacher is not None:
        t = config["training"]
        if group:
            t["batch_size"], t["group_size"] = t["batch_size"] * t["group_size"] // group, group
        t["lr"] = lr or t["lr"]
    config["eval"] = {"before_train": True, "every": eval_every, "at_end": True, "k": 8}
    config["backend"]["adapter_path"] = str(folder / "adapters")
    config["logging"] = {"log_dir": str(folder / "logs")}
    if teacher is not None:
        config["teacher"] = {"model": "tiny", "adapter": str(teacher), "kl_coef": 1.0, "reward_coef": 0.0}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.toml"
    path.write_text(toml_text(config))
    return path


def evaluations(logs: Path) -> list[dict[str, Any]]:
    path = logs / "eval.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a row being written
    return rows


def run(config: Path, env: dict[str, str], target: float | None) -> None:
    """Train `config`; with `target`, Ctrl-C the run at the first evaluation that reaches it."""
    logs = config.parent / "logs"
    with (config.parent / "stdout.log").open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "retrain.cli", str(config)], cwd=config.parent, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None:
                time.sleep(2.0)
                if target is not None and any(r.get("step", 0) > 0 and r.get("eval/pass@1", 0.0) >= target
                                              for r in evaluations(logs)):
                    proc.send_signal(signal.SIGINT)  # saves a checkpoint and exits
                    proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def summary(logs: Path, target: float) -> dict[str, Any]:
    evals = evaluations(logs)
    rows = [json.loads(line) for line in (logs / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rl = [r for r in rows if r.get("phase") != "sft"]
    reached = next((r["step"] for r in evals if r["step"] > 0 and r["eval/pass@1"] >= target), None)
    done = rl if reached is None else [r for r in rl if r["step"] < reached]
    return {
        "steps_to_target": reached,
        "wall_s_to_target": round(sum(r["step_time_s"] for r in done), 1) if reached is not None else None,
        "pass1_before": evals[0]["eval/pass@1"] if evals else None,
        "pass1_last": evals[-1]["eval/pass@1"] if evals else None,
        "last_eval_step": evals[-1]["step"] if evals else None,
        "rl_steps": len(rl),
        "s_per_step": round(statistics.fmean(r["step_time_s"] for r in rl[1:]), 3) if len(rl) > 1 else None,
        "teacher_kl_first_last": [round(rl[0]["teacher/kl"], 4), round(rl[-1]["teacher/kl"], 4)]
        if rl and "teacher/kl" in rl[0] else None,
    }


def teacher_weights(root: Path, env: dict[str, str]) -> tuple[Path, float]:
    """The teacher's weights and their held-out pass@1 (`retrain eval`, the arms' problems)."""
    given = os.environ.get("BENCH_TEACHER")
    folder = root / "teacher"
    final = Path(given).resolve() if given else folder / "adapters" / "final"
    if not final.is_dir():
        steps = int(os.environ.get("BENCH_TEACHER_STEPS", "800"))
        run(demo_config(folder, seed=0, steps=steps, eval_every=steps, teacher=None), env, None)
    config = demo_config(root / "teacher-eval", seed=0, steps=1, eval_every=1, teacher=None)
    done = subprocess.run([sys.executable, "-m", "retrain.cli", "eval", str(config), "--adapter", str(final), "--json"],
                          cwd=config.parent, env=env, capture_output=True, text=True, check=True)
    (row,) = json.loads(done.stdout)
    return final, float(row["pass@1"])


def main() -> None:
    seeds = range(int(os.environ.get("BENCH_FIRST_SEED", "1")),
                  int(os.environ.get("BENCH_FIRST_SEED", "1")) + int(os.environ.get("BENCH_SEEDS", "3")))
    steps = int(os.environ.get("BENCH_STEPS", "600"))
    every = int(os.environ.get("BENCH_EVAL_EVERY", "10"))
    target = float(os.environ.get("BENCH_TARGET", "0.8"))
    threads = os.environ.get("BENCH_THREADS", "1")
    group = int(os.environ.get("BENCH_DISTILL_GROUP", "1"))
    lr = float(os.environ.get("BENCH_DISTILL_LR", "1e-3"))
    root = Path(os.environ.get("BENCH_ROOT") or tempfile.mkdtemp(prefix="bench-distill-"))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    started = time.perf_counter()
    teacher, teacher_pass1 = teacher_weights(root, env)
    arms: dict[str, list[dict[str, Any]]] = {"rl": [], "distill": []}
    for k, seed in enumerate(seeds):
        order = ["rl", "distill"] if k % 2 == 0 else ["distill", "rl"]
        for arm in order:
            folder = root / f"{arm}-s{seed}"
            if not (folder / "logs" / "eval.jsonl").is_file():
                config = demo_config(folder, seed=seed, steps=steps, eval_every=every,
                                     teacher=teacher if arm == "distill" else None, group=group, lr=lr)
                run(config, env, target)
            arms[arm].append({"seed": seed, **summary(folder / "logs", target)})
    fewer = [d["steps_to_target"] is not None and (r["steps_to_target"] is None
                                                  or d["steps_to_target"] < r["steps_to_target"])
             for r, d in zip(arms["rl"], arms["distill"], strict=True)]
    print(json.dumps({"teacher": str(teacher), "teacher_pass1": teacher_pass1, "target": target,
                      "distill_shape": {"prompts": 128 // group, "group": group, "lr": lr},
                      "max_rl_steps": steps, "eval_every": every, "arms": arms,
                      "distill_fewer_steps_every_seed": all(fewer), "root": str(root),
                      "wall_s": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
