"""A `[teacher] model` loaded beside the student (retrain.backends.protocol.TeacherHost): the
distillation teacher of retrain.teacher, frozen.

Loaded like the policy (retrain.models.load), in `[teacher] dtype`, then with `[teacher]
adapter` on top: a LoRA adapter is merged into the weights (a frozen teacher needs no separate
adapter path), a folder of full weights (a `train_full_model` run's adapter) replaces them. The
built-in `tiny` is initialised from the run's seed, like the student. Its parameters never
take a gradient and it stays in eval mode (no dropout), on the student's device or the CPU.

Scoring runs the backbone over right-padded rows, `[teacher] batch_size` at a time (rows of like
length together), gathers the hidden states of the scored positions alone and applies the head
to them in chunks in fp32 (`selected_logprobs_torch`: never a [tokens, vocabulary] tensor), at
temperature 1 over the whole vocabulary, with the head's own scaling and soft-capping as the
model's forward applies them. It runs in the producer's thread while the policy trains, so it
stays off the kernels' per-step call record, which a training step's row reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.teacher.protocol import ScoreRow
from retrain.teacher.tokens import mismatch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class LocalTeacher:
    def __init__(self, model: torch.nn.Module, *, name: str, device: torch.device, pad_id: int,
                 batch_size: int) -> None:
        self.model, self.name, self.device = model, name, device
        self.pad_id, self.batch_size = pad_id, batch_size

    @torch.no_grad()
    def score(self, rows: Sequence[ScoreRow]) -> list[list[float]]:
        order = sorted(range(len(rows)), key=lambda i: len(rows[i].tokens))  # like lengths pad little
        out: list[list[float]] = [[] for _ in rows]
        for at in range(0, len(order), self.batch_size):
            chunk = [rows[i] for i in order[at:at + self.batch_size]]
            width = max(len(r.tokens) for r in chunk)
            ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
            action = torch.zeros((len(chunk), width - 1), dtype=torch.bool)  # position j-1 predicts token j
            for b, r in enumerate(chunk):
                ids[b, :len(r.tokens)] = torch.tensor(r.tokens, dtype=torch.long)
                action[b, r.start - 1:len(r.tokens) - 1] = True
            flat = self._selected(ids.to(self.device), action.to(self.device)).cpu()  # [N], row-major
            at_row = 0
            for i, r in zip(order[at:at + self.batch_size], chunk, strict=True):
                n = len(r.tokens) - r.start
                out[i] = flat[at_row:at_row + n].tolist()
                at_row += n
        return out

    def _selected(self, ids: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """log p(token) at the positions `action` [B, L-1] marks, in row-major order."""
        from retrain.backends.local.logprobs import (
            hidden_states,
            selected_logprobs_torch,
            split_head,
        )
        from retrain.models.families import head_math
        from retrain.models.family import SoftCapped

        hidden = hidden_states(self.model, ids, torch.ones_like(ids))  # [B, L, H]
        rows, cols = action.nonzero(as_tuple=True)
        _, head = split_head(self.model)
        scale, softcap = head_math(self.model.config)
        if softcap is not None:
            head = SoftCapped(head, softcap)  # type: ignore[assignment]
        return selected_logprobs_torch(hidden[rows, cols], head, ids[:, 1:][action], temperature=scale)

    def metrics(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        self.model = None  # type: ignore[assignment]


def load_teacher(config: TrainConfig, *, student_tokenizer: Any, device: torch.device, seed: int,
                 trust_remote_code: bool = False) -> LocalTeacher:
    """The `[teacher]` of `config`, checked against `student_tokenizer` (a Hugging Face one)."""
    from retrain.models.load import ModelSpec, load_model, load_tokenizer
    from retrain.models.source import model_problem

    t = config.teacher
    problem = model_problem(t.model)
    if problem is not None:
        raise UserError(f"[teacher] model = {t.model!r}: {problem}")
    spec = ModelSpec(t.model, trust_remote_code=trust_remote_code)
    check_vocabulary(load_tokenizer(spec), student_tokenizer, t.model, config.model.model)
    model = load_model(spec, seed=seed, dtype=DTYPES[t.dtype])
    if t.adapter:
        model = _with_adapter(model, Path(t.adapter))
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    where = torch.device("cpu") if t.device == "cpu" else device
    model = model.to(where)
    name = t.model + (f" + {t.adapter}" if t.adapter else "")
    pad = student_tokenizer.pad_token_id
    pad_id = pad if isinstance(pad, int) else int(student_tokenizer.eos_token_id or 0)
    return LocalTeacher(model, name=name, device=where, pad_id=pad_id, batch_size=t.batch_size)


def check_vocabulary(teacher: Any, student: Any, teacher_name: str, student_name: str) -> None:
    """Refuse a teacher whose token ids name other text than the student's."""
    a, b = teacher.get_vocab(), student.get_vocab()
    if a == b:
        return
    if len(a) != len(b):
        raise mismatch(teacher_name, student_name, f"vocabularies of {len(a)} and {len(b)} tokens")
    differ = sum(1 for piece, i in a.items() if b.get(piece) != i)
    raise mismatch(teacher_name, student_name, f"{differ} of {len(a)} tokens have other ids")


def _with_adapter(model: torch.nn.Module, folder: Path) -> torch.nn.Module:
    from retrain.backends.local.checkpointing import load_weights, weights_folder

    if not folder.is_dir():
        raise UserError(f"[teacher] adapter = {str(folder)!r}: no such folder")
    if (folder / "adapter_config.json").is_file():
        from peft import PeftModel

        from retrain.models.quiet import no_progress_bars

        with no_progress_bars():
            merged: torch.nn.Module = PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
        return merged
    weights = weights_folder(folder, lora=False)
    if not any(weights.glob("*.safetensors")):
        raise UserError(f"[teacher] adapter = {str(folder)!r} holds neither a LoRA adapter (adapter_config.json) "
                        "nor full weights (*.safetensors)")
    try:
        load_weights(model, weights, lora=False)
    except RuntimeError as exc:
        raise UserError(f"[teacher] adapter = {str(folder)!r}: {exc}",
                        hint="its weights must be those of [teacher] model's architecture") from None
    return model
