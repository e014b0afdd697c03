"""A transformers tokenizer as a GGUF vocabulary, in the two forms llama.cpp reads:

- `gpt2`: a byte-level BPE (Qwen, Llama 3, SmolLM2): the tokens as tokenizer.json spells them,
  its merges, and `tokenizer.ggml.pre` naming the pre-tokenizer's split rule where it is one
  llama.cpp knows by name (`PRE_TOKENIZERS`);
- `llama`: a SentencePiece vocabulary (Gemma, Llama 2; tokenizer.json's BPE with byte
  fallback): the pieces with scores that make llama.cpp's merge-the-highest-scoring-pair
  order the BPE's merge order (a piece scores minus the rank of the first merge that makes it).

A character vocabulary (the built-in `tiny`'s: every token one ASCII character, text split
into characters) is written as `llama` pieces, a space spelled `▁`: llama.cpp's SentencePiece
tokenizer, finding no piece longer than one character, splits text into its characters as the
tokenizer does (a `gpt2` vocabulary cannot hold it: llama.cpp refuses one without merges, and a
vocabulary of characters has none). Every token type is written:
special added tokens are control tokens, other added tokens user-defined ones. Any other kind
of tokenizer (WordPiece, Unigram, a word-level vocabulary) is refused by name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from retrain.errors import UserError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"
#: a byte-level BPE's pre-tokenizer regex -> llama.cpp's name for that split rule
PRE_TOKENIZERS = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+":
        "qwen2",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+":
        "llama-bpe",
}


@dataclass
class Vocab:
    model: str  # tokenizer.ggml.model: gpt2 | llama
    pre: str
    tokens: list[str]
    types: list[int]
    scores: list[float] = field(default_factory=list)
    merges: list[str] = field(default_factory=list)
    add_space_prefix: bool = False
    notes: list[str] = field(default_factory=list)


def vocab_of(tokenizer: Any, gguf_arch: str, n_vocab: int) -> Vocab:
    """The GGUF vocabulary of a fast tokenizer, `n_vocab` tokens long (the model's embedding
    rows; rows past the tokenizer's last id are unused `[PADn]` tokens, as llama.cpp's
    converter writes them). UserError naming the tokenizer's kind when GGUF cannot hold it."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise UserError(f"--format gguf needs a fast tokenizer (tokenizer.json); this one is a "
                        f"{type(tokenizer).__name__}")
    spec = json.loads(backend.to_str())
    model = spec.get("model", {})
    pieces = _pieces(tokenizer, n_vocab)
    added = {int(t["id"]): bool(t.get("special")) for t in spec.get("added_tokens", [])}
    if model.get("type") == "BPE" and _byte_level(spec):
        if gguf_arch == "gemma3":
            raise UserError("--format gguf: a byte-level BPE tokenizer under the gemma3 architecture cannot be "
                            "written (llama.cpp reads Gemma 3's vocabulary as SentencePiece)")
        return _bpe(spec, pieces, added)
    if model.get("type") == "BPE" and model.get("byte_fallback"):
        return _sentencepiece(spec, pieces, added)
    if _characters(tokenizer, pieces, added):
        return _character_vocab(pieces, added)
    kind = model.get("type", "unknown")
    raise UserError(f"--format gguf: the tokenizer is a {kind} model that GGUF cannot hold (llama.cpp reads "
                    "byte-level BPE, SentencePiece and, as one of those, a vocabulary of single characters)")


def _pieces(tokenizer: Any, n_vocab: int) -> list[str | None]:
    by_id: list[str | None] = [None] * n_vocab
    for piece, i in tokenizer.get_vocab().items():
        if i >= n_vocab:
            raise UserError(f"--format gguf: the tokenizer has token {piece!r} at id {i}, past the model's "
                            f"{n_vocab} embedding rows")
        by_id[i] = piece
    return by_id


def _types(pieces: list[str | None], added: dict[int, bool]) -> list[int]:
    out = []
    for i, piece in enumerate(pieces):
        if piece is None:
            out.append(UNUSED)
        elif i in added:
            out.append(CONTROL if added[i] else USER_DEFINED)
        else:
            out.append(NORMAL)
    return out


def _filled(pieces: list[str | None]) -> list[str]:
    return [p if p is not None else f"[PAD{i}]" for i, p in enumerate(pieces)]


def _byte_level(spec: dict[str, Any]) -> bool:
    def kinds(part: Any) -> list[str]:
        if not isinstance(part, dict):
            return []
        inner = part.get("pretokenizers") or part.get("decoders") or []
        return [str(part.get("type")), *[k for p in inner for k in kinds(p)]]

    return "ByteLevel" in kinds(spec.get("pre_tokenizer")) + kinds(spec.get("decoder"))


def _bpe(spec: dict[str, Any], pieces: list[str | None], added: dict[int, bool]) -> Vocab:
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"].get("merges", [])]
    if not merges:
        raise UserError("--format gguf: the tokenizer is a byte-level BPE without merges, which llama.cpp "
                        "refuses to load")
    regex = _split_regex(spec.get("pre_tokenizer"))
    pre = PRE_TOKENIZERS.get(regex or "", "default" if regex is None else "")
    notes = []
    if not pre:
        pre = "default"
        notes.append("the tokenizer's pre-tokenizer is not one llama.cpp knows by name: llama.cpp splits text "
                     "by its default rule before the merges")
    return Vocab("gpt2", pre, _filled(pieces), _types(pieces, added), merges=merges, notes=notes)


def _split_regex(part: Any) -> str | None:
    """The regex of a pre-tokenizer's Split step (None for GPT-2's built-in ByteLevel split)."""
    if not isinstance(part, dict):
        return None
    if part.get("type") == "Split":
        pattern = part.get("pattern", {})
        return str(pattern.get("Regex") or pattern.get("String") or "")
    for inner in part.get("pretokenizers") or []:
        found = _split_regex(inner)
        if found is not None:
            return found
    return None


def _sentencepiece(spec: dict[str, Any], pieces: list[str | None], added: dict[int, bool]) -> Vocab:
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"].get("merges", [])]
    made_by: dict[str, int] = {}
    for rank, merge in enumerate(merges):
        left, right = merge.split(" ", 1)
        made_by.setdefault(left + right, rank)
    scores, types = [], _types(pieces, added)
    for i, piece in enumerate(pieces):
        if piece is not None and i not in added and piece.startswith("<0x") and len(piece) == 6:
            types[i] = BYTE
        rank = made_by.get(piece or "")
        scores.append(-1000.0 if types[i] != NORMAL else float(-rank) if rank is not None else -1e6 - i)
    prefix = "Prepend" in json.dumps(spec.get("normalizer")) or '"prepend_scheme": "always"' in json.dumps(
        spec.get("pre_tokenizer"))
    return Vocab("llama", "default", _filled(pieces), types, scores=scores, add_space_prefix=prefix)


def _characters(tokenizer: Any, pieces: list[str | None], added: dict[int, bool]) -> bool:
    """Whether every ordinary token is one ASCII character and text splits into its characters."""
    chars = [p for i, p in enumerate(pieces) if p is not None and i not in added]
    if not chars or any(len(c) != 1 or ord(c) > 127 for c in chars):
        return False
    vocab = tokenizer.get_vocab()
    probe = "".join(chars) * 2
    return list(tokenizer.encode(probe, add_special_tokens=False)) == [vocab[c] for c in probe]


def _character_vocab(pieces: list[str | None], added: dict[int, bool]) -> Vocab:
    spelled = [p if p is None or i in added else p.replace(" ", SPACE) for i, p in enumerate(pieces)]
    types = _types(pieces, added)
    scores = [-1000.0 if t != NORMAL else 0.0 for t in types]
    return Vocab("llama", "default", _filled(spelled), types, scores=scores)


def write_vocab(writer: Any, tokenizer: Any, vocab: Vocab, eot: int | None) -> None:
    """The vocabulary, the special ids, whether encoding adds bos/eos, and the chat template."""
    writer.add_tokenizer_model(vocab.model)
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    if vocab.scores:
        writer.add_token_scores(vocab.scores)
    if vocab.merges:
        writer.add_token_merges(vocab.merges)
    if vocab.model == "llama":
        writer.add_add_space_prefix(vocab.add_space_prefix)
    for name, value in (("bos", tokenizer.bos_token_id), ("eos", tokenizer.eos_token_id),
                        ("unk", tokenizer.unk_token_id), ("pad", tokenizer.pad_token_id), ("eot", eot)):
        if isinstance(value, int):
            getattr(writer, f"add_{name}_token_id")(value)
    framed = list(tokenizer("a").input_ids)
    plain = list(tokenizer("a", add_special_tokens=False).input_ids)
    writer.add_add_bos_token(len(framed) > len(plain) and framed[0] == tokenizer.bos_token_id)
    writer.add_add_eos_token(len(framed) > len(plain) and framed[-1] == tokenizer.eos_token_id)
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and template:
        writer.add_chat_template(template)
