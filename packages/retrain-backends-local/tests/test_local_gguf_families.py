"""Each llama.cpp architecture retrain converts, checked against what its file means: a tiny
GGUF written as llama.cpp's converter writes one (tests/gguf_files.py: the gguf package's tensor
names, llama.cpp's changes to the weights, quantised projections) converts to the model whose
logits are the source model's with the dequantised projections; a SentencePiece vocabulary
splits text as llama.cpp's tokenizer does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from gguf_files import ARCHS, sentencepiece_vocab, spm_reference, write_gguf

from retrain.models.load import ModelSpec, load_model, load_tokenizer

pytest.importorskip("gguf")
TEXTS = ["The capital of France is Paris.", "the  capital\n\nof France?", "xyz abc bcab", "3+5={8}",
         "<start_of_turn>user\nthe capital<end_of_turn>\n", "naïve café 🙂 Ω", "  two spaces first", ""]


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("RETRAIN_CACHE_DIR", str(root))
    return root


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_each_architecture_converts_to_the_model_its_file_means(arch: str, tmp_path: Path) -> None:
    written = write_gguf(tmp_path / f"{arch}.gguf", arch)
    model = load_model(ModelSpec(str(written.path)), seed=0).eval()
    assert model.config.model_type == written.reference.config.model_type
    ids = torch.tensor([[2, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50]])  # longer than Gemma's window of 4
    with torch.no_grad():
        got, want = model(ids).logits, written.reference(ids).logits
    # Gemma's norms come back as (1 + w) - 1 in fp32: equal to the last bits, not exactly
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    assert want.std() > 0.1  # logits that carry the weights, not a constant


def test_gemma3_keeps_what_llama_cpp_reads_and_transformers_does_not(tmp_path: Path) -> None:
    written = write_gguf(tmp_path / "gemma3.gguf", "gemma3")
    config = load_model(ModelSpec(str(written.path)), seed=0).config
    assert config.query_pre_attn_scalar == 16  # 1/sqrt(head_dim), not the default 256's
    assert config.rope_parameters["full_attention"]["rope_type"] == "linear"
    assert config.rope_parameters["full_attention"]["factor"] == 8.0
    assert config.rope_parameters["sliding_attention"]["rope_theta"] == 10000.0
    assert config.layer_types.count("full_attention") == 1 and config.sliding_window == 4


@pytest.mark.parametrize("prefix", [False, True], ids=["gemma", "add_space_prefix"])
def test_a_sentencepiece_vocabulary_splits_text_as_llama_cpp_does(prefix: bool, tmp_path: Path) -> None:
    written = write_gguf(tmp_path / "spm.gguf", "gemma3", add_space_prefix=prefix)
    tok = load_tokenizer(ModelSpec(str(written.path)))
    pieces, scores, kinds = sentencepiece_vocab()
    for text in TEXTS:
        want = [2, *spm_reference(text, pieces, scores, kinds, add_space_prefix=prefix)]  # <bos> first
        assert tok(text).input_ids == want, text
        if not prefix:  # llama.cpp too decodes a prefixed stretch after a control piece with its space
            assert tok.decode(want, skip_special_tokens=True) == text.replace("<start_of_turn>", "").replace(
                "<end_of_turn>", "")
    assert tok.convert_ids_to_tokens(tok(" the capital").input_ids) == \
        ["<bos>", *(["\u2581"] if prefix else []), "\u2581the", "\u2581capital"]
    assert (tok.bos_token, tok.eos_token, tok.pad_token, tok.unk_token) == ("<bos>", "<eos>", "<pad>", "<unk>")
