"""Tiny models built from configs in tmp dirs; nothing is downloaded."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # tiny_families: the family matrix's checkpoints
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # the backend sizes its CPU threads from it (pytest -n 2: one each)


@pytest.fixture(scope="session", autouse=True)
def _threads() -> None:
    import torch

    torch.set_num_threads(1)


def make_config(*flags: str):  # type: ignore[no-untyped-def]
    from retrain.validation.load import load_config

    base = ["--model", "tiny", "--devices", "cpu", "--seed", "0", "--lora-rank", "4"]
    return load_config(None, [*base, *flags], import_plugins=False).config


@pytest.fixture
def write_gguf():  # type: ignore[no-untyped-def]
    """write_gguf(path) -> (path, the Hugging Face model it was written from): a small GGUF
    written the way llama.cpp writes one: a 2-layer llama with random weights, a byte-level
    BPE tokenizer with ChatML's special tokens and template, and the ids right in the file
    (bos <|im_start|>, eos <|im_end|>), which transformers' reader turns into the eos quirk."""
    return write_llama_gguf


@pytest.fixture
def tiny_config():  # type: ignore[no-untyped-def]
    return make_config


# -- a GGUF file for the loader's tests ------------------------------------------------------
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _byte_chars() -> list[str]:
    """GPT-2's byte-to-unicode table, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's rotary layout for q and k (transformers' reader undoes it)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llama_gguf(path: Path, seed: int = 0) -> tuple[Path, torch.nn.Module]:
    import gguf
    from transformers import AutoConfig, AutoModelForCausalLM

    merges = ["Ġ t", "h e", "Ġt he"]
    tokens = SPECIAL + _byte_chars() + ["Ġt", "he", "Ġthe"]
    config = AutoConfig.for_model("llama", vocab_size=len(tokens), hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-5,
                                  tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).eval()
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name("retrain test llama")
    w.add_block_count(2)
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_dimension_count(16)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(SPECIAL) + [1] * (len(tokens) - len(SPECIAL)))
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(CHATML)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(2):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", _permute(sd[p + "self_attn.q_proj.weight"], 4))
        w.add_tensor(f"blk.{i}.attn_k.weight", _permute(sd[p + "self_attn.k_proj.weight"], 2))
        w.add_tensor(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, model
