"""TRL's GSPO, CISPO and SAPO losses, and its sampler-mismatch correction, with their LoRA
gradients on given inputs; run with the TRL environment's python.

    python trl_objectives.py CASE.json OUT.safetensors

CASE.json is trl_loss.py's (`model`, `adapter`, `prompts`, `completions`, `advantages`,
`old_logprobs`, `max_tokens`) with `runs`: a list of `{"key", "loss_type", "epsilon",
"epsilon_high"?, "importance_sampling_level"?, "beta"?, "sapo_temperature_pos"?,
"sapo_temperature_neg"?, "is_mode"?, "is_cap"?}`. For each run the script builds a
`GRPOTrainer` with those settings around the adapter and stores `<key>/loss` and
`<key>/<parameter name>` (the gradient of every trainable parameter of the `default` adapter).

Without `is_mode` the inputs are trl_loss.py's: `old_logprobs` are TRL's `old_per_token_logps`
(the behaviour policy of the ratio). With `is_mode` (TRL's `vllm_importance_sampling_mode`,
clip max `is_cap`, no clip min) `old_logprobs` are the sampler's logprobs instead, and TRL's own
`_generate_and_score_completions` prepares the batch: its `_generate` is replaced by one that
returns the case's prompt and completion ids with those logprobs, as vLLM would, and
`use_vllm` is set after construction (vLLM is not installed), so TRL itself computes the
trainer's logprobs (`old_per_token_logps`), the importance-sampling ratios, their truncation
or mask, and the padding. The case's advantages then replace the ones TRL derives from its
(zero) rewards, so both sides see the same advantages.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path
from types import ModuleType

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from datasets import Dataset
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.grpo_trainer import use_adapter


def _trl_loss() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trl_loss", Path(__file__).with_name("trl_loss.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TRL_LOSS = _trl_loss()


def trainer_for(case: dict, spec: dict) -> tuple[GRPOTrainer, AutoTokenizer]:
    tokenizer = AutoTokenizer.from_pretrained(case["model"])
    base = AutoModelForCausalLM.from_pretrained(case["model"], dtype=torch.float32)
    model = PeftModel.from_pretrained(base, case["adapter"], is_trainable=True)
    rows = len(case["completions"])
    extra = {k: spec[k] for k in ("epsilon_high", "sapo_temperature_pos", "sapo_temperature_neg") if k in spec}
    if "is_mode" in spec:
        extra.update(vllm_importance_sampling_mode=spec["is_mode"], vllm_importance_sampling_clip_max=spec["is_cap"],
                     vllm_importance_sampling_clip_min=None)
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=rows, num_generations=rows,
                      max_completion_length=case["max_tokens"], loss_type=spec["loss_type"], epsilon=spec["epsilon"],
                      beta=float(spec.get("beta", 0.0)),
                      importance_sampling_level=spec.get("importance_sampling_level", "token"),
                      use_cpu=True, bf16=False, report_to=[], save_strategy="no", gradient_checkpointing=False,
                      **extra)
    dataset = Dataset.from_list([{"prompt": "0"}] * rows)
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **_: [0.0] * len(completions), args=args,
                          train_dataset=dataset, processing_class=tokenizer)
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop per accumulation window
    trainer.model.train()
    return trainer, tokenizer


def sampled_batch(trainer: GRPOTrainer, case: dict) -> dict:
    """TRL's training batch for the case's completions sampled "by vLLM" with the case's
    logprobs (see the module docstring)."""
    rows = len(case["completions"])

    def generate(prompts: list) -> tuple:
        return (case["prompts"], case["completions"], None, ["x"] * rows, case["old_logprobs"], {}, None,
                [None] * rows)

    trainer._generate = generate
    trainer.use_vllm = True
    assert trainer.vllm_importance_sampling_correction
    batch = trainer._generate_and_score_completions([{"prompt": "0"}] * rows)
    batch["advantages"] = torch.tensor(case["advantages"], dtype=torch.float32)
    return batch


def run(case: dict, spec: dict) -> dict[str, torch.Tensor]:
    trainer, tokenizer = trainer_for(case, spec)
    rows = len(case["completions"])
    if "is_mode" in spec:
        batch = sampled_batch(trainer, case)
    else:
        batch = TRL_LOSS.inputs(case, tokenizer.pad_token_id)
        if spec.get("beta"):
            ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
            mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
            with torch.no_grad(), use_adapter(trainer.accelerator.unwrap_model(trainer.model), adapter_name=None):
                batch["ref_per_token_logps"], _, _ = trainer._get_per_token_logps_and_entropies(
                    trainer.model, ids, mask, batch["completion_ids"].size(1), batch_size=rows)
    out = TRL_LOSS.backward(trainer, batch, spec["key"])
    if "importance_sampling_ratio" in batch:
        out[f"{spec['key']}/is_ratio"] = batch["importance_sampling_ratio"].detach().float().contiguous()
    return out


def main() -> None:
    TRL_LOSS.serve(run)


if __name__ == "__main__":
    main()
