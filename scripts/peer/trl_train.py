"""Train the comparison task (assets.py) with TRL's GRPOTrainer; run with the TRL environment's
python, print one JSON line.

    python trl_train.py --model DIR --profile medium --seed 0 --steps 24 [--top-k 0] [--loss-type dapo]

The settings mirror retrain_train.py: LoRA r8 / alpha 16 / dropout 0 on every linear layer
but the head ("all-linear"), `scale_rewards="none"` (group-mean advantages), `loss_type="dapo"`
(the token mean over the step), beta 0, lr 1e-3 constant, AdamW (0.9, 0.999, 1e-8), no weight
decay, no gradient clipping, temperature 1, top_p 1, one optimizer step per generated batch.
Everything else is TRL's default (gradient checkpointing included), as a TRL user gets it.
Step times run from `on_train_begin` to each `on_step_end`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from assets import PROFILES, problems, run_arguments, score
from datasets import Dataset
from peft import LoraConfig
from step_clock import StepClock
from trl import GRPOConfig, GRPOTrainer


def reward(completions: list[str], answer: list[str], **_: object) -> list[float]:
    return [score(c, a) for c, a in zip(completions, answer, strict=True)]


def main() -> None:
    parser = run_arguments()
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--loss-type", default="dapo")
    args = parser.parse_args()
    shape = PROFILES[args.profile]
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-peer-"), per_device_train_batch_size=shape["prompts"] * shape["group"],
        num_generations=shape["group"], max_completion_length=shape["max_tokens"], learning_rate=1e-3,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
        adam_epsilon=1e-8, max_grad_norm=0.0, scale_rewards="none", loss_type=args.loss_type, beta=0.0,
        max_steps=args.steps, logging_steps=1, report_to=[], use_cpu=True, bf16=False, save_strategy="no",
        temperature=1.0, top_p=1.0, top_k=args.top_k, seed=args.seed, dataloader_num_workers=0)
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear")
    clock = StepClock()
    trainer = GRPOTrainer(model=args.model, reward_funcs=reward, args=config, peft_config=lora,
                          train_dataset=Dataset.from_list(problems()), callbacks=[clock])
    trainer.train()
    rewards = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    step_times = [b - a for a, b in zip(clock.marks, clock.marks[1:], strict=False)]
    print(json.dumps({"trainer": "trl", "profile": args.profile, "seed": args.seed, "steps": args.steps,
                      "rewards": rewards, "step_times": step_times, "train_wall_s": clock.marks[-1] - clock.marks[0],
                      "torch_threads": torch.get_num_threads(), "top_k": args.top_k, "loss_type": args.loss_type}))


if __name__ == "__main__":
    main()
