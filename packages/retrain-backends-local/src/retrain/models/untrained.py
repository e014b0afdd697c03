"""Whether a loaded checkpoint has learned language at all, asked once at load: its mean loss
on one fixed English sentence, against log(vocab), the loss of guessing uniformly.

A trained model scores 2-5 nats/token on the sentence; a randomly initialised one, or one
whose weights or tokenizer were converted wrong, scores near log(vocab) or above (Gemma 3
270M with characters for tokens: 15.3 against log(262,144) = 12.5). Training either one
starts from noise and every figure after it means nothing, so the run says so in one line
at start-up. It warns and goes on rather than refusing: a random initialisation saved to a
folder is a legitimate start (tests, from-scratch experiments); the built-in `tiny` is random
by design and never checked. The cost is one forward pass over about 20 tokens.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import torch

SENTENCE = "The capital of France is Paris. Water boils at one hundred degrees Celsius at sea level."
#: the share of log(vocab) above which a checkpoint counts as untrained: trained models sit
#: below a third of it on this sentence (SmolLM2-135M: 0.30), random ones at 1.0 or above
NEAR_UNIFORM = 0.75


def sentence_loss(model: torch.nn.Module, tokenizer: Any) -> tuple[float, int]:
    """(mean next-token loss in nats over the sentence, the vocabulary's size); the tokenizer's
    own framing (`<bos>`) counts as context."""
    ids = tokenizer(SENTENCE, return_tensors="pt").input_ids
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(ids.to(device)).logits[0, :-1].float()
    return float(torch.nn.functional.cross_entropy(logits, ids[0, 1:].to(device))), int(logits.shape[-1])


def untrained_note(model: torch.nn.Module, tokenizer: Any, name: str) -> str | None:
    """One line naming `[model] model` when the sentence's loss is near log(vocab), else None."""
    loss, vocab = sentence_loss(model, tokenizer)
    uniform = math.log(vocab)
    if loss < NEAR_UNIFORM * uniform:
        return None
    return (f"retrain: [model] model = {name!r} looks untrained or broken: {loss:.1f} nats/token on a plain "
            f"English sentence, near uniform guessing over its {vocab:,} tokens ({uniform:.1f}; a trained "
            "model scores 2-5), so training starts from noise (a random initialisation, or a wrong "
            "conversion or tokenizer)")


def warn_if_untrained(model: torch.nn.Module, tokenizer: Any, name: str) -> None:
    note = untrained_note(model, tokenizer, name)
    if note is not None:
        print(note, file=sys.stderr)
