"""`retrain export --format gguf`: a LoRA checkpoint of each architecture built (llama, qwen2, qwen3,
gemma3) written as f16 and q8_0 through the gguf package and read back independently by
transformers' GGUF loading (`gguf_file=`, with the head size and Gemma 3 settings the file
states and transformers' reader drops put back, as retrain's own GGUF reader does): the same
greedy tokens and the logits of the merged model within F16_TOLERANCE / Q8_0_TOLERANCE; the
file's tokenizer encodes text as the checkpoint's does, in each vocabulary form (a byte-level
BPE, a SentencePiece BPE, the built-in tiny's characters). Other families, configurations
llama.cpp cannot express and multimodal checkpoints are refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from export_models import logits, lora_checkpoint, with_adapter
from gguf_files import write_gguf
from tiny_families import COMMON, tokenizer, write_checkpoint

from retrain.backends.export import BaseModel, ExportRequest
from retrain.backends.local.checkpointing import write_checkpoint as write_trained
from retrain.backends.local.export.check import Reference, read_back_gguf
from retrain.backends.local.export.run import export
from retrain.errors import UserError
from retrain.models.gguf import converted, file_config, gguf_source, read_tokenizer
from retrain.models.load import ModelSpec, load_model, load_tokenizer
from retrain.models.quiet import no_gguf_bars, no_progress_bars

pytest.importorskip("gguf")
#: the largest |logit difference| of a read-back model to the merged one (these models' logits
#: reach 0.4-1.3): measured up to 1.3e-3 (f16) and 2.4e-2 (q8_0), on Gemma 3, whose embeddings
#: are scaled by sqrt(hidden) after the rounding; 3e-4 and 7.5e-3 on the others (docs/export.md)
F16_TOLERANCE = 3e-3
Q8_0_TOLERANCE = 5e-2
TEXTS = ["12+7=", "The capital of France is Paris.", "the  capital\n\nof", "xyz abc bcab", "3+5={8}", ""]
#: Gemma 3 as llama.cpp runs it: five sliding-window layers, then a global one
GEMMA3 = dict(COMMON, num_hidden_layers=6, head_dim=8, query_pre_attn_scalar=8, sliding_window=4,
              layer_types=["sliding_attention"] * 5 + ["full_attention"])


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RETRAIN_CACHE_DIR", str(tmp_path / "cache"))


def gemma3_checkpoint(folder: Path) -> Path:
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("gemma3_text", **GEMMA3))
    with no_progress_bars():
        model.save_pretrained(str(folder))
        tokenizer().save_pretrained(str(folder))
    return folder


def converted_checkpoint(arch: str, root: Path) -> Path:
    """A checkpoint with the tokenizer a GGUF of `arch` carries (tests/gguf_files.py: a byte-level
    BPE with merges for llama and qwen2, a SentencePiece vocabulary for gemma3), as retrain
    converts the file into a transformers folder."""
    written = write_gguf(root / f"{arch}.gguf", arch)
    source = gguf_source(str(written.path))
    assert source is not None
    return converted(source)


def base_of(kind: str, root: Path) -> Path:
    if kind == "qwen3":
        return write_checkpoint("qwen3", root / "base")  # the built-in tiny's characters
    if kind == "gemma3":
        return gemma3_checkpoint(root / "base")  # characters, under a SentencePiece reader
    return converted_checkpoint(kind.removesuffix(" spm"), root)


def lora_on(base: Path, root: Path) -> tuple[Path, torch.nn.Module]:
    wrapped = with_adapter(load_model(ModelSpec(str(base)), seed=0), spread=0.05)
    optimizer = torch.optim.AdamW([p for p in wrapped.parameters() if p.requires_grad])
    folder = write_trained(root / "checkpoint_step_2", model=wrapped, lora=True, optimizer=optimizer, rng={},
                           meta={"seed": 0, "model": str(base)})
    return folder, wrapped


def read_gguf(file: Path) -> tuple[torch.nn.Module, object]:
    """transformers' own GGUF loading of `file`, its config completed from the file."""
    from gguf import GGUFReader
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = GGUFReader(str(file)).fields
    read = AutoConfig.from_pretrained(str(file.parent), gguf_file=file.name).to_dict()
    model_type = read.pop("model_type")
    file_config(fields, model_type, read)
    with no_progress_bars(), no_gguf_bars():
        model = AutoModelForCausalLM.from_pretrained(str(file.parent), gguf_file=file.name, dtype=torch.float32,
                                                     config=AutoConfig.for_model(model_type, **read))
    return model.eval(), read_tokenizer(fields, file)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3", "gemma3", "gemma3 spm"])
@pytest.mark.parametrize("gguf_type", ["f16", "q8_0"])
def test_each_architecture_reads_back_as_the_merged_model(kind: str, gguf_type: str, tmp_path: Path) -> None:
    import gguf

    base = base_of(kind, tmp_path)
    checkpoint, wrapped = lora_on(base, tmp_path)
    out = tmp_path / "export"
    export(ExportRequest(checkpoint, True, BaseModel(str(base)), "gguf", out, gguf_type=gguf_type))
    (file,) = out.glob("*.gguf")
    model, gguf_tokenizer = read_gguf(file)
    source = load_tokenizer(ModelSpec(str(base)))
    assert [gguf_tokenizer(t).input_ids for t in TEXTS] == [source(t).input_ids for t in TEXTS]  # type: ignore[operator]
    ids = torch.tensor([source("12+7= the capital of France").input_ids])
    got, want = logits(model, ids), logits(wrapped, ids)
    tolerance = F16_TOLERANCE if gguf_type == "f16" else Q8_0_TOLERANCE
    off = float((got - want).abs().max())
    assert off < tolerance
    plain = logits(load_model(ModelSpec(str(base)), seed=0).eval(), ids)
    assert float((got - plain).abs().max()) > 5 * off  # the adapter is in the file, far beyond the rounding
    assert Reference.of_model(wrapped, source).greedy == Reference.of_model(model, source).greedy
    matrices = {t.name: t.tensor_type for t in gguf.GGUFReader(str(file)).tensors}
    want_type = gguf.GGMLQuantizationType.F16 if gguf_type == "f16" else gguf.GGMLQuantizationType.Q8_0
    assert matrices["blk.0.attn_q.weight"] == matrices["blk.0.ffn_down.weight"] == want_type
    assert matrices["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32


def test_verify_reads_the_gguf_back_and_records_it(tmp_path: Path) -> None:
    base = base_of("qwen3", tmp_path)
    checkpoint, wrapped = lora_on(base, tmp_path)
    result = export(ExportRequest(checkpoint, True, BaseModel(str(base)), "gguf", tmp_path / "export",
                                  gguf_type="q8_0", verify=True))
    assert any("read back by transformers' GGUF loading" in note and "greedy tokens 12/12 alike" in note
               for note in result.notes)
    readback = read_back_gguf(tmp_path / "export" / "model-q8_0.gguf",
                              Reference.of_model(wrapped, load_tokenizer(ModelSpec(str(base)))))
    assert readback.tokenizer_agrees and readback.max_logit_diff < Q8_0_TOLERANCE


@pytest.mark.parametrize(("name", "refusal"), [
    ("mistral short window", "built for llama, qwen2, qwen3, gemma3 models, and this is a mistral model"),
    ("phi3", "this is a phi3 model"),
    ("gemma3 text", "alternates sliding-window and global layers in another pattern than five to one"),
    ("gemma3 multimodal", r"multimodal checkpoint \(gemma3\) is not built yet"),
    ("qwen2", "byte-level BPE without merges"),  # the character vocabulary as transformers rebuilds it for qwen2
])
def test_what_gguf_cannot_hold_is_refused_by_name(name: str, refusal: str, tmp_path: Path) -> None:
    base, checkpoint, _ = lora_checkpoint(name, tmp_path)
    with pytest.raises(UserError, match=refusal):
        export(ExportRequest(checkpoint, True, BaseModel(str(base)), "gguf", tmp_path / "export"))
    assert not (tmp_path / "export").exists()
