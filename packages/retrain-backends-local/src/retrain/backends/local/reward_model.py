"""`[reward] type = "model"` on this machine: a sequence-classification checkpoint
(`AutoModelForSequenceClassification`) that the reward's scorer (retrain.rewards.model.scorer)
asks for logits, registered in the `retrain.rewards` entry-point group as "model".

Texts are tokenized as a server would (special tokens added), right-padded `model_batch_size`
at a time, and pooled at each text's last token, as vLLM pools them: a decoder classifier
(a `.model` backbone under a `.score` head: Llama, Qwen, Mistral, Gemma, ...) has its head
applied to the hidden state there; any other class pools itself, told the pad id. Frozen, in
eval mode, in float32, on the CPU or the first `[backend]` device. A failure of the
forward pass is a `Refused` reward failure: counted against the error budget like a server's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.rewards.judge.errors import Refused

FAILED = "a reward-model forward pass that failed"


class LocalClassifier:
    def __init__(self, config: TrainConfig) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from retrain.inference_engine.pytorch.device import plan_device
        from retrain.models.quiet import import_model_classes, no_progress_bars
        from retrain.models.source import model_problem

        r = config.reward
        if problem := model_problem(r.model):
            raise UserError(f"[reward] model = {r.model!r}: {problem}")
        import_model_classes()
        with no_progress_bars():
            self.tokenizer = AutoTokenizer.from_pretrained(r.model)
            model = AutoModelForSequenceClassification.from_pretrained(r.model, dtype=torch.float32)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        if pad is None:
            raise UserError(f"[reward] model = {r.model!r}: its tokenizer has neither a pad nor an end token, "
                            "so texts of several lengths cannot be batched")
        self.pad_id = int(pad)
        model.config.pad_token_id = self.pad_id  # the pooling finds each text's last token by it
        self.device = plan_device(config.backend.devices) if r.model_device == "student" else torch.device("cpu")
        self.model: Any = model.to(self.device).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.name = r.model
        self.labels = int(self.model.config.num_labels)
        if r.model_score in ("sigmoid", "logit") and self.labels != 1:
            raise UserError(f"[reward] model_score = {r.model_score!r} reads a one-label head; {r.model!r} has "
                            f"{self.labels} labels", hint='model_score = "softmax" with model_label = N')
        if r.model_score == "softmax" and not -self.labels <= r.model_label < self.labels:
            raise UserError(f"[reward] model_label = {r.model_label}: {r.model!r} has {self.labels} labels")

    @torch.no_grad()
    def classify(self, texts: Sequence[str]) -> list[list[float]]:
        try:
            rows = [self.tokenizer(t, add_special_tokens=True)["input_ids"] for t in texts]
            width = max(len(r) for r in rows)
            ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for b, r in enumerate(rows):
                ids[b, :len(r)] = torch.tensor(r, dtype=torch.long)
                mask[b, :len(r)] = 1
            ids, mask = ids.to(self.device), mask.to(self.device)
            last = torch.tensor([len(r) - 1 for r in rows], device=self.device)
            backbone, head = getattr(self.model, "model", None), getattr(self.model, "score", None)
            if backbone is not None and isinstance(head, torch.nn.Module):
                hidden = backbone(input_ids=ids, attention_mask=mask).last_hidden_state  # [B, L, H]
                logits = head(hidden[torch.arange(len(rows), device=self.device), last])  # [B, labels]
            else:
                logits = self.model(input_ids=ids, attention_mask=mask).logits
            return [[float(v) for v in row] for row in logits.float().cpu()]
        except Exception as exc:  # any failure of the model on these texts: counted, not fatal
            raise Refused(FAILED, f"{type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        self.model = None
