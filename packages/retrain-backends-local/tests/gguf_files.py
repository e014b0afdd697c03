"""Small GGUF files written the way llama.cpp's converter writes them, from tiny random Hugging
Face models, and llama.cpp's SentencePiece tokenizer restated: what retrain's conversion is
checked against without a download.

The writer takes its tensor names from the gguf package's own table (`get_tensor_name_map`,
llama.cpp's converter's), applies llama.cpp's per-architecture changes (llama's rotary row
order for q and k, Gemma's norms stored as 1 + w), and stores the projections quantised
(Q8_0, Q5_0, Q4_0: the gguf package's quantisers), so `written.reference` is the model the file
means: the source model with those projections replaced by their dequantised values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SPACE = "\u2581"
#: a SentencePiece vocabulary: control pieces, user-defined ones, bytes, characters, merged
#: pieces (scored by rank: the earlier, the higher), as llama.cpp stores Gemma's
SPM_CONTROL = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
SPM_USER = ["\n", "\n\n", "  "]
SPM_CHARS = [SPACE, *"abcdefghijklmnopqrstuvwxyzTFWP0123456789.,?+=\\{}"]
SPM_MERGED = [f"{SPACE}t", "he", f"{SPACE}the", "is", f"{SPACE}is", f"{SPACE}c", "ap", "it", "al", "ital",
              f"{SPACE}of", "in", f"{SPACE}in", "ar", "ari", "aris", f"{SPACE}P", f"{SPACE}Paris", "an", "ce",
              "ance", "ra", "Fr", "Fra", "Franc", "France", f"{SPACE}France", f"{SPACE}ca", "pit", "cap",
              f"{SPACE}cap", f"{SPACE}capital", f"{SPACE}{SPACE}", "ab", "bc", "abc", "xy", "yz", "xyz"]


@dataclass
class Arch:
    """One llama.cpp architecture as its converter writes it."""
    gguf_arch: str
    model_type: str
    config: dict[str, Any]
    permute_qk: bool = False  # llama.cpp's LlamaModel reorders q/k rows for its rotary kernel
    norm_offset: float = 0.0  # Gemma: norms stored as 1 + w
    sentencepiece: bool = False
    space_prefix: bool = False  # a SentencePiece vocabulary's add_space_prefix (Llama 2, Phi-3)
    name: str = "retrain test"
    extra: dict[str, Any] = field(default_factory=dict)


BASE: dict[str, Any] = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6)
ARCHS: dict[str, Arch] = {
    "llama": Arch("llama", "llama", dict(BASE, rope_theta=10000.0), permute_qk=True),
    "qwen2": Arch("qwen2", "qwen2", dict(BASE, rope_theta=1000000.0)),
    "qwen3": Arch("qwen3", "qwen3", dict(BASE, head_dim=16, rope_theta=1000000.0)),
    # six layers: Gemma 3's fixed pattern of five sliding-window layers and one global; a window
    # shorter than the test's prompt; a head size whose attention scale is not the default 256;
    # the global layer's rotary stretched (llama.cpp writes rope.scaling for Gemma 3 4B and up)
    "gemma3": Arch("gemma3", "gemma3_text", dict(
        BASE, num_hidden_layers=6, head_dim=16, num_key_value_heads=1, sliding_window=4, query_pre_attn_scalar=16,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
        norm_offset=1.0, sentencepiece=True, extra={"rope_scaling": ("linear", 8.0)}),
    "phi3": Arch("phi3", "phi3", dict(BASE, num_key_value_heads=4, rope_theta=10000.0), sentencepiece=True,
                 space_prefix=True),
}
QUANTISED = {"attn_q": "Q8_0", "attn_k": "Q5_0", "attn_v": "Q4_0", "attn_qkv": "Q8_0", "ffn_up": "Q8_0",
             "ffn_gate": "Q5_0", "ffn_down": "Q8_0"}


@dataclass
class Written:
    path: Path
    reference: torch.nn.Module  # the model the file means: dequantised projections
    pieces: list[str]


def byte_chars() -> list[str]:
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


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's rotary row order for q and k (transformers' reader undoes it)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def sentencepiece_vocab() -> tuple[list[str], list[float], list[int]]:
    """(pieces, scores, llama.cpp token types) of the small SentencePiece vocabulary."""
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    pieces = [*SPM_CONTROL, *SPM_USER, *bytes_, *SPM_CHARS, *SPM_MERGED]
    kinds = [3] * len(SPM_CONTROL) + [4] * len(SPM_USER) + [6] * 256 + [1] * (len(SPM_CHARS) + len(SPM_MERGED))
    scores = [-1000.0] * len(SPM_CONTROL) + [0.0] * (len(SPM_USER) + 256) + \
        [-float(i) for i in range(len(SPM_CHARS) + len(SPM_MERGED))]
    return pieces, scores, kinds


def write_gguf(path: Path, arch: str, seed: int = 0, add_space_prefix: bool | None = None) -> Written:
    import gguf
    from transformers import AutoConfig, AutoModelForCausalLM

    a = ARCHS[arch]
    pieces = sentencepiece_vocab()[0] if a.sentencepiece else SPECIAL + byte_chars() + ["Ġt", "he", "Ġthe"]
    ids = dict(bos_token_id=2, eos_token_id=1, pad_token_id=0) if a.sentencepiece else \
        dict(bos_token_id=1, eos_token_id=2)
    config = AutoConfig.for_model(a.model_type, **{**a.config, "vocab_size": len(pieces), **ids,
                                                   "tie_word_embeddings": True})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).eval()
    w = gguf.GGUFWriter(str(path), arch=a.gguf_arch)
    _write_metadata(w, a, config)
    _write_vocab(w, a, pieces, ids, a.space_prefix if add_space_prefix is None else add_space_prefix)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[a.gguf_arch.upper()], config.num_hidden_layers)
    meant = {}
    for key, tensor in model.state_dict().items():
        if key == "lm_head.weight":
            continue
        data, meant[key] = _tensor(key, tensor.detach().numpy().astype(np.float32), a, config, gguf)
        name = names.get_name(key, try_suffixes=(".weight", ".bias"))
        assert name is not None, key
        qtype = QUANTISED.get(name.split(".")[-2]) if name.endswith(".weight") else None
        if qtype is None:
            w.add_tensor(name, data)
        else:
            raw = gguf.quants.quantize(data, gguf.GGMLQuantizationType[qtype])
            w.add_tensor(name, raw, raw_dtype=gguf.GGMLQuantizationType[qtype])
            meant[key] = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[qtype])
            if a.permute_qk and name.split(".")[-2] in ("attn_q", "attn_k"):  # meant in HF row order
                heads = config.num_attention_heads if "attn_q" in name else config.num_key_value_heads
                meant[key] = _unpermute(meant[key], heads)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in meant.items()}, strict=False)
    return Written(path, model, pieces)


def _tensor(key: str, data: np.ndarray, a: Arch, config: Any, gguf: Any) -> tuple[np.ndarray, np.ndarray]:
    """(what the file stores, what it means in Hugging Face's layout) for one tensor."""
    stored = data
    if a.permute_qk and key.endswith(("q_proj.weight", "k_proj.weight")):
        heads = config.num_attention_heads if "q_proj" in key else config.num_key_value_heads
        stored = permute(data, heads)
    if a.norm_offset and key.endswith("norm.weight"):
        stored = data + np.float32(a.norm_offset)
    return stored, data


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _write_metadata(w: Any, a: Arch, config: Any) -> None:
    import gguf

    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    w.add_name(a.name)
    w.add_block_count(config.num_hidden_layers)
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_rope_dimension_count(head_dim)
    if "head_dim" in a.config:  # llama.cpp writes a head size the config states
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if a.gguf_arch == "gemma3":
        w.add_sliding_window(config.sliding_window)
        w.add_rope_freq_base(config.rope_parameters["full_attention"]["rope_theta"])
        kind, factor = a.extra["rope_scaling"]
        w.add_rope_scaling_type(gguf.RopeScalingType(kind))
        w.add_rope_scaling_factor(factor)
    else:
        w.add_rope_freq_base(config.rope_parameters["rope_theta"])


def _write_vocab(w: Any, a: Arch, pieces: list[str], ids: dict[str, int], add_space_prefix: bool) -> None:
    w.add_vocab_size(len(pieces))
    w.add_token_list(pieces)
    if a.sentencepiece:
        _, scores, kinds = sentencepiece_vocab()
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_scores(scores)
        w.add_token_types(kinds)
        w.add_unk_token_id(3)
        w.add_pad_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        w.add_add_space_prefix(add_space_prefix)
    else:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_types([3] * len(SPECIAL) + [1] * (len(pieces) - len(SPECIAL)))
        w.add_token_merges(["Ġ t", "h e", "Ġt he"])
        w.add_chat_template(CHATML)
    w.add_bos_token_id(ids["bos_token_id"])
    w.add_eos_token_id(ids["eos_token_id"])


def spm_reference(text: str, pieces: list[str], scores: list[float], kinds: list[int],
                  add_space_prefix: bool = False) -> list[int]:
    """llama.cpp's SentencePiece tokenizer, restated: user-defined and control pieces matched
    whole first (longest first); in each stretch between them, spaces as `▁` (one more in front
    with `add_space_prefix`), then the adjacent pair whose joined text is a piece merged,
    highest score first and leftmost on ties, until none is; unknown symbols as byte pieces.
    No `<bos>`."""
    vocab = {p: i for i, p in enumerate(pieces)}
    whole = sorted((p for p, k in zip(pieces, kinds, strict=True) if k in (3, 4)), key=len, reverse=True)
    out: list[int] = []
    for part in re.split("(" + "|".join(map(re.escape, whole)) + ")", text):
        if part in vocab and kinds[vocab[part]] in (3, 4):
            out.append(vocab[part])
        elif part:
            out.extend(_merge(("\u2581" if add_space_prefix else "") + part.replace(" ", SPACE), vocab, scores))
    return out


def _merge(text: str, vocab: dict[str, int], scores: list[float]) -> list[int]:
    symbols = list(text)
    while True:
        best: tuple[float, int] | None = None
        for i in range(len(symbols) - 1):
            j = vocab.get(symbols[i] + symbols[i + 1])
            if j is not None and (best is None or scores[j] > best[0]):
                best = (scores[j], i)
        if best is None:
            break
        i = best[1]
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
    out = []
    for s in symbols:
        out.extend([vocab[s]] if s in vocab else [vocab[f"<0x{b:02X}>"] for b in s.encode("utf-8")])
    return out
