"""Distil with TRL's GKDTrainer (scripts/bench/distill_smollm2.py's TRL side); run with the TRL
environment's python, print one JSON line.

    python trl_gkd.py --model DIR --teacher DIR --data FILE --seed 1 --steps 20 --out DIR

`lmbda = 1` (every batch is the student's own samples: on-policy) and `beta = 1` (the
generalized JSD at beta 1 is the reverse KL, KL(student || teacher), over the whole vocabulary
at each sampled position): the objective retrain's `[teacher]` estimates from the sampled
token. `--data` holds {"system", "prompt", "reference"} rows in the order retrain walks its
problems for the seed; TRL reads them in that order (`shuffle_dataset` off, sequential
sampler), so step k of both asks the same prompts. Settings mirror the retrain side: LoRA rank
`--rank`, alpha 2 x rank, dropout 0 on every linear layer ("all-linear"), constant lr, AdamW
(0.9, 0.999, 1e-8), no weight decay or clipping, temperature 1, top_k 0, top_p 1, one
completion per prompt, float32 student and teacher. Everything else is TRL's default, as a TRL
user gets it. The trained adapter is saved to `--out` (retrain's evaluator scores it).
"""

from __future__ import annotations

import argparse
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
from transformers import AutoTokenizer
from trl.experimental.gkd import GKDConfig, GKDTrainer


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--model", "--teacher", "--data", "--out"):
        parser.add_argument(name, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--rank", type=int, default=16)
    args = parser.parse_args()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
    data = Dataset.from_list([{"messages": [{"role": "system", "content": r["system"]},
                                            {"role": "user", "content": r["prompt"]},
                                            {"role": "assistant", "content": f"\\boxed{{{r['reference']}}}"}]}
                              for r in rows])
    config = GKDConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-gkd-"), per_device_train_batch_size=args.prompts,
        max_new_tokens=args.max_tokens, temperature=1.0, lmbda=1.0, beta=1.0, learning_rate=args.lr,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
        adam_epsilon=1e-8, max_grad_norm=0.0, max_steps=args.steps, logging_steps=1, report_to=[], use_cpu=True,
        bf16=False, save_strategy="no", seed=args.seed, dataloader_num_workers=0, shuffle_dataset=False,
        train_sampling_strategy="sequential", model_init_kwargs={"dtype": "float32"},
        teacher_model_init_kwargs={"dtype": "float32"})
    lora = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0, target_modules="all-linear")
    clock = StepClock()
    trainer = GKDTrainer(model=args.model, teacher_model=args.teacher, args=config, train_dataset=data,
                         processing_class=AutoTokenizer.from_pretrained(args.model), peft_config=lora,
                         callbacks=[clock])
    trainer.train()
    trainer.save_model(args.out)
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    step_times = [b - a for a, b in zip(clock.marks, clock.marks[1:], strict=False)]
    print(json.dumps({"trainer": "trl_gkd", "seed": args.seed, "steps": args.steps, "losses": losses,
                      "step_times": step_times, "train_wall_s": clock.marks[-1] - clock.marks[0],
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "torch_threads": torch.get_num_threads(), "adapter": args.out}))


if __name__ == "__main__":
    main()
