"""Supervised warmup inside an RL run (`[training] sft_warmup_steps`).

Each warmup step trains on `sft_batch_size` (default `batch_size`) examples. With
`sft_data_path` set they are that file's rows in `sft_batch_order` (retrain.training.sft);
otherwise the [data] prompts in order: the prompt as the model sees it, then the target (the
example's SFT completion, else `\\boxed{reference}`) and EOS, with advantage 1 on the target
tokens. Either way a datum is cut to `sft_max_tokens` (0: `max_tokens` + 512). The SFT loss
is `sft_loss_fn` (its `auto` is importance_sampling for warmup, like the reference;
cross_entropy learns far faster from a random initialisation).
"""

from __future__ import annotations

from collections.abc import Sequence

from retrain.backends.protocol import Tokenizer
from retrain.config.schema import TrainConfig
from retrain.types import Datum, Example


def target_text(example: Example) -> str:
    return example.completion or f"\\boxed{{{example.reference}}}"


def sft_datum(prompt_ids: Sequence[int], target_ids: Sequence[int], eos: Sequence[int], cap: int = 0) -> Datum:
    """Prompt, target and EOS, cut to `cap` tokens (0 = no cap)."""
    target = list(target_ids) + list(eos[:1])
    tokens = list(prompt_ids) + target
    advantages = [0.0] * len(prompt_ids) + [1.0] * len(target)
    if cap > 0:
        tokens, advantages = tokens[:cap], advantages[:cap]
    return Datum(tokens=tokens, logprobs=[0.0] * len(tokens), advantages=advantages)


class WarmupData:
    """Target token ids per example, encoded once."""

    def __init__(self, tokenizer: Tokenizer, cap: int = 0) -> None:
        self.tokenizer = tokenizer
        self.cap = cap
        self._targets: dict[str, list[int]] = {}

    def datum(self, example: Example, prompt_ids: Sequence[int]) -> Datum:
        text = target_text(example)
        ids = self._targets.get(text)
        if ids is None:
            ids = self._targets[text] = self.tokenizer.encode(text)
        return sft_datum(prompt_ids, ids, self.tokenizer.eos_token_ids, self.cap)


def warmup_lr(config: TrainConfig) -> float:
    return config.training.sft_lr or config.training.lr


def warmup_batch_size(config: TrainConfig) -> int:
    return config.training.sft_batch_size or config.training.batch_size
