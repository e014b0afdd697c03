"""Supervised fine-tuning with TRL's SFTTrainer on a prompt/completion JSONL; run with the TRL
environment's python, print one JSON line.

    python trl_sft.py --model DIR --data ROWS.jsonl --steps 30 --batch 16 [--full] [--seed 0]

The settings mirror what scripts/bench/sft_trl.py gives retrain: LoRA r8 / alpha 16 /
dropout 0 on every linear layer but the head (or every weight with --full), lr 1e-3 constant,
AdamW (0.9, 0.999, 1e-8), no weight decay, no gradient clipping, no packing, loss on the
completion only (TRL's default for prompt/completion rows), EOS appended to the completion.
Everything else is TRL's default, as a TRL user gets it. Step times run from `on_train_begin`
to each `on_step_end`; `tokens` counts the non-padding tokens of every batch TRL's collator
built, so tokens/s compares like with like.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse

import torch
from datasets import Dataset
from peft import LoraConfig
from step_clock import StepClock
from trl import SFTConfig, SFTTrainer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
    config = SFTConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-sft-"), per_device_train_batch_size=args.batch, learning_rate=1e-3,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
        adam_epsilon=1e-8, max_grad_norm=0.0, max_steps=args.steps, logging_steps=1, report_to=[],
        use_cpu=args.cpu, bf16=not args.cpu and torch.cuda.is_available(), save_strategy="no", seed=args.seed,
        dataloader_num_workers=0, packing=False, gradient_checkpointing=False)
    lora = None if args.full else LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear")
    clock = StepClock()
    trainer = SFTTrainer(model=args.model, args=config, peft_config=lora, train_dataset=Dataset.from_list(rows),
                         callbacks=[clock])
    counts: list[int] = []
    collate = trainer.data_collator

    def counting(features):  # type: ignore[no-untyped-def]
        batch = collate(features)
        counts.append(int(batch["attention_mask"].sum()) if "attention_mask" in batch else int(batch["input_ids"].numel()))
        return batch

    trainer.data_collator = counting
    trainer.train()
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    step_times = [b - a for a, b in zip(clock.marks, clock.marks[1:], strict=False)]
    print(json.dumps({"trainer": "trl", "steps": args.steps, "losses": losses, "step_times": step_times,
                      "tokens": sum(counts[:args.steps]), "train_wall_s": clock.marks[-1] - clock.marks[0],
                      "torch_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
