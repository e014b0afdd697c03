"""A GGUF's SentencePiece vocabulary (`tokenizer.ggml.model = "llama"`: Gemma, Llama 2,
Mistral, Phi-3) as a fast tokenizer that splits text the way llama.cpp does.

transformers' GGUF reader gets these wrong: for Gemma it builds a Unigram model from the
scores, which are BPE merge priorities (minus the piece's rank), not log-probabilities, and
transformers 5 then reloads the saved folder as a BPE with no merges, so "The capital of
France is" became 24 single characters with no `<bos>`: a model fed that is near uniform over
its 262k tokens (15.3 nats/token) though its weights are right.

llama.cpp's SentencePiece tokenizer starts from the text's characters (spaces written `▁`, one
more in front when `add_space_prefix`) and keeps merging the adjacent pair whose joined text
is a piece, the highest-scoring first; what stays unknown falls back to `<0xXX>` byte pieces.
A BPE whose merges are every split of every piece into two pieces, ranked by the joined
piece's score, merges in that same order. Control pieces (`<bos>`, `<start_of_turn>`) and
user-defined ones (runs of newlines, `<table>`) are matched whole in the text first, as
llama.cpp matches them; `<bos>`/`<eos>` are added where the file says to. Pieces of equal
score tie-break on rank here and on position in llama.cpp: the tests compare the two on text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: llama.cpp's token types (gguf.TokenType)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"


def is_sentencepiece(fields: Mapping[str, Any]) -> bool:
    """Whether a GGUF's vocabulary (`GGUFReader(file).fields`) is SentencePiece's: scored
    pieces, no merges list."""
    return (_text(fields, "tokenizer.ggml.model") == "llama" and "tokenizer.ggml.merges" not in fields
            and "tokenizer.ggml.scores" in fields)


def sentencepiece_tokenizer(fields: Mapping[str, Any]) -> Any:
    """A `PreTrainedTokenizerFast` over a GGUF's SentencePiece vocabulary (the module
    docstring); its chat template is the file's, when it has one."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors
    from transformers import PreTrainedTokenizerFast

    pieces = [bytes(fields["tokenizer.ggml.tokens"].parts[i]).decode("utf-8")
              for i in fields["tokenizer.ggml.tokens"].data]
    scores = numbers(fields, "tokenizer.ggml.scores", float)
    kinds = numbers(fields, "tokenizer.ggml.token_type", int) or [NORMAL] * len(pieces)
    ids = {"bos": _id(fields, "bos"), "eos": _id(fields, "eos"), "unk": _id(fields, "unknown"),
           "pad": _id(fields, "padding")}
    prefix = _flag(fields, "tokenizer.ggml.add_space_prefix", True)
    vocab = {piece: i for i, piece in enumerate(pieces)}
    unk = pieces[ids["unk"]] if ids["unk"] is not None else None
    tok = Tokenizer(models.BPE(vocab, merges(pieces, scores, kinds), unk_token=unk, fuse_unk=True,
                               byte_fallback=True))
    replace = normalizers.Replace(" ", SPACE)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), replace]) if prefix else replace
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tok.decoder = decoders.Sequence(steps + ([decoders.Strip(" ", 1, 0)] if prefix else []))
    tok.add_tokens([AddedToken(p, special=False, normalized=False)
                    for p, k in zip(pieces, kinds, strict=True) if k == USER_DEFINED])
    tok.add_special_tokens([AddedToken(p, special=True, normalized=False)
                            for p, k in zip(pieces, kinds, strict=True) if k in (CONTROL, UNKNOWN)])
    tok.post_processor = _framing(pieces, ids, _flag(fields, "tokenizer.ggml.add_bos_token", True),
                                  _flag(fields, "tokenizer.ggml.add_eos_token", False), processors)
    named = {f"{k}_token": pieces[i] for k, i in ids.items() if i is not None}
    out = PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False, **named)
    template = _text(fields, "tokenizer.chat_template")
    if template:
        out.chat_template = template
    return out


def merges(pieces: list[str], scores: list[float], kinds: list[int]) -> list[tuple[str, str]]:
    """Every split of a piece into two pieces, the highest-scoring joined piece first. Byte
    pieces are reached by fallback only, never by merging their spelling."""
    index = {p: i for i, (p, k) in enumerate(zip(pieces, kinds, strict=True)) if k != BYTE}
    found = []
    for piece, i in index.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in index and right in index:
                found.append((-scores[i], i, cut, left, right))
    found.sort()
    return [(left, right) for *_, left, right in found]


def _framing(pieces: list[str], ids: dict[str, int | None], bos: bool, eos: bool, processors: Any) -> Any:
    """`<bos> $A <eos>` as far as the file asks for each."""
    head = [pieces[ids["bos"]]] if bos and ids["bos"] is not None else []
    tail = [pieces[ids["eos"]]] if eos and ids["eos"] is not None else []
    special = [(pieces[i], i) for i in {ids["bos"], ids["eos"]} if i is not None and pieces[i] in head + tail]
    return processors.TemplateProcessing(single=[*head, "$A", *tail],
                                         pair=[*head, "$A", *tail, *head, "$B:1", *tail], special_tokens=special)


def numbers(fields: Mapping[str, Any], key: str, kind: type) -> list[Any]:
    import numpy as np

    field = fields.get(key)
    if field is None:
        return []
    return [kind(v) for v in np.concatenate([field.parts[i] for i in field.data]).tolist()]


def _id(fields: Mapping[str, Any], name: str) -> int | None:
    field = fields.get(f"tokenizer.ggml.{name}_token_id")
    return int(field.parts[field.data[0]][0]) if field is not None else None


def _flag(fields: Mapping[str, Any], key: str, default: bool) -> bool:
    field = fields.get(key)
    return bool(field.parts[field.data[0]][0]) if field is not None else default


def _text(fields: Mapping[str, Any], key: str) -> str | None:
    field = fields.get(key)
    return bytes(field.parts[field.data[0]]).decode("utf-8") if field is not None else None
