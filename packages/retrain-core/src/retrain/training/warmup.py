"""Supervised warmup inside an RL run (`[training] sft_warmup_steps`).

Each warmup step trains on `sft_batch_size` (default `batch_size`) examples: the prompt as the
model sees it, then the target (the example's SFT completion, else `\\boxed{reference}`) and
EOS, with advantage 1 on the target tokens. The SFT loss is `sft_loss_fn` (its `auto` is
importance_sampling for warmup, like the reference; cross_entropy learns far faster from a
random initialisation).
"""

from __future__ import annotations

from collections.abc import Sequence

from retrain.backends.protocol import Tokenizer
from retrain.config.schema import TrainConfig
from retrain.io.json import numbered_rows
from retrain.types import Datum, Example


def target_text(example: Example) -> str:
    return example.completion or f"\\boxed{{{example.reference}}}"


def sft_datum(prompt_ids: Sequence[int], target_ids: Sequence[int], eos: Sequence[int]) -> Datum:
    target = list(target_ids) + list(eos[:1])
    tokens = list(prompt_ids) + target
    return Datum(tokens=tokens, logprobs=[0.0] * len(tokens),
                 advantages=[0.0] * len(prompt_ids) + [1.0] * len(target))


def load_sft_examples(path: str) -> list[Example]:
    """SFT rows from JSONL: {prompt, completion}, {messages: [...]} (last assistant turn is the
    target) or {text} (no prompt)."""
    out = []
    for n, row in numbered_rows(path):
        if "prompt" in row and "completion" in row:
            out.append(Example(prompt=str(row["prompt"]), reference="", completion=str(row["completion"])))
        elif isinstance(row.get("messages"), list) and row["messages"]:
            msgs = row["messages"]
            last = msgs[-1]
            prompt = "\n".join(str(m.get("content", "")) for m in msgs[:-1] if m.get("role") != "assistant")
            out.append(Example(prompt=prompt, reference="", completion=str(last.get("content", ""))))
        elif "text" in row:
            out.append(Example(prompt="", reference="", completion=str(row["text"])))
        else:
            raise ValueError(f"{path}:{n}: expected prompt/completion, messages or text")
    return out


class WarmupData:
    """Target token ids per example, encoded once."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._targets: dict[str, list[int]] = {}

    def datum(self, example: Example, prompt_ids: Sequence[int]) -> Datum:
        text = target_text(example)
        ids = self._targets.get(text)
        if ids is None:
            ids = self._targets[text] = self.tokenizer.encode(text)
        return sft_datum(prompt_ids, ids, self.tokenizer.eos_token_ids)


def effective_sft_loss(config: TrainConfig) -> str:
    """`sft_loss_fn` with `auto` resolved: cross_entropy for trainer = sft, else
    importance_sampling (the reference's choice for warmup)."""
    fn = config.training.sft_loss_fn
    if fn != "auto":
        return fn
    return "cross_entropy" if config.training.trainer == "sft" else "importance_sampling"


def warmup_lr(config: TrainConfig) -> float:
    return config.training.sft_lr or config.training.lr


def warmup_batch_size(config: TrainConfig) -> int:
    return config.training.sft_batch_size or config.training.batch_size
