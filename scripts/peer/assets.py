"""The task both trainers learn when retrain is compared with TRL: one model, one data set,
one reward, importable from either trainer's environment.

- `build_model(dir, profile)`: a random-init Qwen3 (weights from `init_seed`) with a
  character tokenizer whose chat template is the bare message text, saved with
  `save_pretrained`, so both trainers load the same bytes and tokenize a prompt to the same
  ids (no BOS, no role markers).
- `problems(n)`: single-digit additions `a+b=` with their sums.
- `score(completion, answer)`: 1.0 when the completion starts with the answer, else half its
  share of digit characters, so an untrained model's groups have reward variance.
- `examples(config)` and `score` double as retrain plugins (`[data] source`, `[reward] type`).

Profiles: completions per step = prompts x group.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

PROFILES: dict[str, dict[str, int]] = {
    "small": {"hidden": 128, "layers": 4, "max_tokens": 8, "prompts": 2, "group": 8},
    "medium": {"hidden": 256, "layers": 6, "max_tokens": 32, "prompts": 8, "group": 8},
}
SPECIAL = ["<pad>", "<bos>", "<eos>"]
CHARS = "0123456789+-*=?:{}\\ abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,\n"
PROBLEMS = 512


def build_model(out: str | Path, profile: str, init_seed: int = 0) -> Path:
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3Config

    shape = PROFILES[profile]
    vocab = {t: i for i, t in enumerate([*SPECIAL, *CHARS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    out = Path(out)
    fast.save_pretrained(out)
    hidden = shape["hidden"]
    config = Qwen3Config(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=3 * hidden,
                         num_hidden_layers=shape["layers"], num_attention_heads=4, num_key_value_heads=2,
                         head_dim=hidden // 4, max_position_embeddings=256, pad_token_id=0, bos_token_id=1,
                         eos_token_id=2, tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(out)
    return out


def problems(n: int = PROBLEMS, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        rows.append({"prompt": f"{a}+{b}=", "answer": str(a + b)})
    return rows


def score(completion: str, answer: str) -> float:
    if completion.strip().startswith(answer):
        return 1.0
    return 0.5 * sum(ch.isdigit() for ch in completion) / max(1, len(completion))


def examples(config: Any = None) -> list[dict[str, str]]:
    """retrain data source: the problems as prompt/answer rows."""
    return problems()


def run_arguments() -> argparse.ArgumentParser:
    """The arguments both trainers' runners take: the saved model, profile, seed and steps."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="small")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=10)
    return parser
