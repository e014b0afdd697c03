"""Train the real-model comparison (scripts/bench/real_model.py) with TRL's GRPOTrainer; run
with the TRL environment's python, print one JSON line.

    python real_trl.py --model DIR --data FILE --boxed FILE --seed 1 --steps 12

`--data` is the JSONL both trainers read ({"system", "prompt", "reference"} rows: the chat
turns retrain renders for its built-in arithmetic), `--boxed` retrain's own reward module
(`retrain/rewards/boxed.py`, plain Python), loaded by path so both trainers score with the same
code. Settings mirror the retrain side: LoRA rank `--rank`, alpha 2 x rank, dropout 0 on every
linear layer of the blocks ("all-linear"), group-mean advantages (`scale_rewards="none"`), the
token mean over the step (`loss_type="dapo"`), beta 0, constant lr, AdamW (0.9, 0.999, 1e-8),
no weight decay or clipping, temperature 1, top_p 1, one optimizer step per generated batch.
`--in-order` walks `--data` in file order (TRL's `shuffle_dataset` off): the benchmark writes it
in the order retrain walks the problems for the seed, so both trainers see the same prompts.
Everything else is TRL's default, as a TRL user gets it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from datasets import Dataset
from peft import LoraConfig
from step_clock import StepClock
from trl import GRPOConfig, GRPOTrainer


def load_reward(path: str) -> object:
    spec = importlib.util.spec_from_file_location("retrain_boxed", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PartialCreditReward()


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--model", "--data", "--boxed"):
        parser.add_argument(name, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--in-order", action="store_true")
    args = parser.parse_args()
    partial = load_reward(args.boxed)

    def reward(completions: list[list[dict[str, str]]], reference: list[str], **_: object) -> list[float]:
        return [partial.score(c[-1]["content"], r) for c, r in zip(completions, reference, strict=True)]  # type: ignore[attr-defined]

    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
    data = Dataset.from_list([{"prompt": [{"role": "system", "content": r["system"]},
                                          {"role": "user", "content": r["prompt"]}],
                               "reference": r["reference"]} for r in rows])
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-real-"), per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group, max_completion_length=args.max_tokens, learning_rate=args.lr,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
        adam_epsilon=1e-8, max_grad_norm=0.0, scale_rewards="none", loss_type="dapo", beta=0.0,
        max_steps=args.steps, logging_steps=1, report_to=[], use_cpu=True, bf16=False, save_strategy="no",
        temperature=1.0, top_p=1.0, top_k=0, seed=args.seed, dataloader_num_workers=0,
        shuffle_dataset=not args.in_order)
    lora = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0, target_modules="all-linear")
    clock = StepClock()
    trainer = GRPOTrainer(model=args.model, reward_funcs=reward, args=config, peft_config=lora,
                          train_dataset=data, callbacks=[clock])
    trainer.train()
    rewards = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    step_times = [b - a for a, b in zip(clock.marks, clock.marks[1:], strict=False)]
    print(json.dumps({"trainer": "trl", "seed": args.seed, "steps": args.steps, "rewards": rewards,
                      "step_times": step_times, "train_wall_s": clock.marks[-1] - clock.marks[0],
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "torch_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
