"""Regenerate the built-in `tiny` model's config and character tokenizer (package data).

The files are committed; this script documents how they were made and is re-run only when
the vocabulary or the architecture changes. Nothing is downloaded.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

OUT = Path(__file__).resolve().parents[1] / "packages/retrain-backends-local/src/retrain/models/tiny"
SPECIAL = ["<pad>", "<bos>", "<eos>", "<|system|>", "<|user|>", "<|assistant|>"]
CHARS = [c for c in string.printable if c not in "\r\x0b\x0c"]  # digits, letters, punctuation, space, \t, \n
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


def main() -> None:
    vocab = {tok: i for i, tok in enumerate(SPECIAL)}
    for ch in CHARS:
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIAL)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<pad>", padding_side="left")
    fast.chat_template = CHAT_TEMPLATE
    OUT.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(OUT)
    config = {**CONFIG, "vocab_size": len(vocab)}
    (OUT / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"wrote {OUT} (vocab {len(vocab)})")


if __name__ == "__main__":
    main()
