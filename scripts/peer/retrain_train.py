"""Train the comparison task (assets.py) with retrain; print one JSON line.

    python scripts/peer/retrain_train.py --model DIR --profile medium --seed 0 --steps 24 \
        [--set training.loss_aggregation=seq_mean_token_mean ...]

The settings are TRL's `GRPOConfig` defaults where TRL has one that changes the math, and the
comparison's otherwise (trl_train.py): LoRA r8 / alpha 16 / dropout 0 on every linear layer of
the blocks, group-mean advantages without std scaling, the token-mean loss, lr 1e-3 constant,
AdamW (0.9, 0.999, 1e-8), no weight decay, no gradient clipping, temperature 1, top_p 1.
`--set section.key=value` (TOML literal) changes one key, for ablations. `--budget-s T` keeps
training past `--steps` until T seconds of training have passed (at most 4 x steps), for
comparisons at equal wall-clock; the trainer has no wall-clock stop, so the reporter ends the
run by raising `BudgetSpent`.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
import tempfile
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from assets import PROFILES, run_arguments  # noqa: E402


def settings(model: str, profile: str, seed: int, steps: int, root: Path) -> dict[str, dict[str, Any]]:
    shape = PROFILES[profile]
    return {
        "model": {"model": model, "lora_rank": 8},
        "lora": {"alpha": 16, "dropout": 0.0},
        "backend": {"backend": "local", "devices": "cpu", "adapter_path": str(root / "adapters")},
        "algorithm": {"advantage_mode": "grpo", "transform_mode": "none"},
        "optimizer": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "grad_clip_norm": 0.0},
        "training": {"seed": seed, "max_steps": steps, "batch_size": shape["prompts"], "group_size": shape["group"],
                     "max_tokens": shape["max_tokens"], "temperature": 1.0, "top_p": 1.0, "lr": 1e-3,
                     "weight_decay": 0.0, "save_every": 0},
        "data": {"source": "assets:examples"},
        "reward": {"type": "assets:score"},
        "plugins": {"search_paths": [str(HERE)]},
        "logging": {"log_dir": str(root / "logs")},
    }


def apply_sets(tables: dict[str, dict[str, Any]], sets: list[str]) -> None:
    for item in sets:
        key, _, literal = item.partition("=")
        section, _, name = key.partition(".")
        tables.setdefault(section, {})[name] = tomllib.loads(f"v = {literal}")["v"]


def to_toml(tables: Mapping[str, Mapping[str, Any]]) -> str:
    lines = []
    for section, values in tables.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


class BudgetSpent(Exception):
    pass


class StepClock:
    """Wall time at the end of each RL step, from the moment the run starts its first step
    (what TRL's `on_train_begin` / `on_step_end` measure on the other side)."""

    def __init__(self, steps: int, budget_s: float) -> None:
        self.steps, self.budget_s = steps, budget_s
        self.marks: list[float] = []
        self.rewards: list[float] = []

    def start(self, info: Mapping[str, Any]) -> None:
        self.marks = [time.perf_counter()]

    def warmup(self, step: int, total: int, row: Mapping[str, Any]) -> None:
        pass

    def step(self, step: int, total: int, row: Mapping[str, Any]) -> None:
        self.marks.append(time.perf_counter())
        self.rewards.append(float(row["mean_reward"]))
        if len(self.rewards) >= self.steps and self.marks[-1] - self.marks[0] >= self.budget_s:
            raise BudgetSpent

    def message(self, text: str) -> None:
        print(text, file=sys.stderr)

    def finish(self, summary: Mapping[str, Any]) -> None:
        pass


def main() -> None:
    parser = run_arguments()
    parser.add_argument("--budget-s", type=float, default=0.0)
    parser.add_argument("--set", action="append", default=[], dest="sets")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from retrain.training.trainers import train
    from retrain.validation.load import load_config

    root = Path(tempfile.mkdtemp(prefix="retrain-peer-"))
    max_steps = 4 * args.steps if args.budget_s > 0 else args.steps
    tables = settings(args.model, args.profile, args.seed, max_steps, root)
    apply_sets(tables, args.sets)
    path = root / "run.toml"
    path.write_text(to_toml(tables))
    config = load_config(str(path)).config
    clock = StepClock(args.steps, args.budget_s)
    with contextlib.suppress(BudgetSpent):
        train(config, clock, config_path=str(path))
    step_times = [b - a for a, b in zip(clock.marks, clock.marks[1:], strict=False)]
    print(json.dumps({"trainer": "retrain", "profile": args.profile, "seed": args.seed, "steps": args.steps,
                      "rewards": clock.rewards, "step_times": step_times,
                      "train_wall_s": clock.marks[-1] - clock.marks[0], "torch_threads": torch.get_num_threads(),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "sets": args.sets}))


if __name__ == "__main__":
    main()
