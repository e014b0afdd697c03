"""TRL's GRPO loss and LoRA gradients on given inputs; run with the TRL environment's python.

    python trl_loss.py CASE.json OUT.safetensors

CASE.json: `model` (a saved model dir), `adapter` (a saved peft LoRA adapter dir), `prompts`
and `completions` (token id lists, one completion per row, its prompt repeated), `advantages`
(one per row), `old_logprobs` (one per completion token), `max_tokens`, and `runs`: a list of
`{"loss_type": ..., "epsilon": ..., "beta": ...}` (beta optional, 0 by default). For each run
the script builds a `GRPOTrainer` with those settings around the adapter, calls its
`compute_loss` on the padded tensors TRL's own generation step would have produced (prompts
left-padded, completions right-padded, masks, `num_items_in_batch`), backpropagates, and stores
`<key>/loss` and `<key>/<parameter name>` (the gradient) for every trainable parameter of the
`default` adapter, where key is `<loss_type>/<epsilon>`, or `<loss_type>/<epsilon>@<beta>` when
beta > 0.

With beta > 0 the reference logprobs are TRL's own, computed by its
`_get_per_token_logps_and_entropies` with the adapters disabled (the base model), as its
generation step does for a fresh adapter. (Handed an already trained adapter, TRL would instead
copy it into a frozen "ref" adapter and measure the KL to that; retrain's reference is always
the base model, so the comparison pins the base model on both sides.) TRL's default
`use_bias_correction_kl = True` weighs the KL by the importance ratio; so does retrain.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from datasets import Dataset
from peft import PeftModel
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.grpo_trainer import use_adapter


def pad(rows: list[list[float]], value: float, left: bool, dtype: torch.dtype) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        if r:
            if left:
                out[i, width - len(r):] = torch.tensor(r, dtype=dtype)
            else:
                out[i, :len(r)] = torch.tensor(r, dtype=dtype)
    return out


def inputs(case: dict, pad_id: int) -> dict[str, torch.Tensor]:
    prompts, completions = case["prompts"], case["completions"]
    return {
        "prompt_ids": pad(prompts, pad_id, True, torch.long),
        "prompt_mask": pad([[1] * len(p) for p in prompts], 0, True, torch.long),
        "completion_ids": pad(completions, pad_id, False, torch.long),
        "completion_mask": pad([[1] * len(c) for c in completions], 0, False, torch.long),
        "advantages": torch.tensor(case["advantages"], dtype=torch.float32),
        "old_per_token_logps": pad(case["old_logprobs"], 0.0, False, torch.float32),
        "num_items_in_batch": torch.tensor(sum(len(c) for c in completions)),
    }


def run_key(loss_type: str, epsilon: float, beta: float) -> str:
    return f"{loss_type}/{epsilon}" + (f"@{beta}" if beta else "")


def run(case: dict, loss_type: str, epsilon: float, beta: float = 0.0) -> dict[str, torch.Tensor]:
    tokenizer = AutoTokenizer.from_pretrained(case["model"])
    base = AutoModelForCausalLM.from_pretrained(case["model"], dtype=torch.float32)
    model = PeftModel.from_pretrained(base, case["adapter"], is_trainable=True)
    rows = len(case["completions"])
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=rows, num_generations=rows,
                      max_completion_length=case["max_tokens"], loss_type=loss_type, epsilon=epsilon, beta=beta,
                      use_cpu=True, bf16=False, report_to=[], save_strategy="no", gradient_checkpointing=False)
    dataset = Dataset.from_list([{"prompt": "0"}] * rows)
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **_: [0.0] * len(completions), args=args,
                          train_dataset=dataset, processing_class=tokenizer)
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop per accumulation window
    trainer.model.train()
    batch = inputs(case, tokenizer.pad_token_id)
    if beta:
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        with torch.no_grad(), use_adapter(trainer.accelerator.unwrap_model(trainer.model), adapter_name=None):
            batch["ref_per_token_logps"], _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, mask, batch["completion_ids"].size(1), batch_size=rows)
    return backward(trainer, batch, run_key(loss_type, epsilon, beta))


def backward(trainer: GRPOTrainer, batch: dict, key: str) -> dict[str, torch.Tensor]:
    """TRL's loss on `batch`, backpropagated: the loss and every trainable parameter's
    gradient (zeros where none flowed), named under `key/`."""
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    out = {f"{key}/loss": loss.detach().reshape(1)}
    for name, p in trainer.model.named_parameters():
        if p.requires_grad and ".ref." not in name:
            out[f"{key}/{name}"] = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
    return out


def serve(run_one: Callable[[dict, dict], dict[str, torch.Tensor]]) -> None:
    """`python SCRIPT CASE.json OUT.safetensors`: every run of the case, one thread, saved."""
    case_path, out_path = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    case = json.loads(Path(case_path).read_text())
    tensors: dict[str, torch.Tensor] = {}
    for spec in case["runs"]:
        tensors.update(run_one(case, spec))
    save_file({k: v.contiguous() for k, v in tensors.items()}, out_path)


def main() -> None:
    serve(lambda case, spec: run(case, spec["loss_type"], float(spec["epsilon"]), float(spec.get("beta", 0.0))))


if __name__ == "__main__":
    main()
