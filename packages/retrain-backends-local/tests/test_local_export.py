"""`retrain export`'s writer of transformers folders and adapters, on every family of the matrix
(tests/tiny_families.py): the merged export is the base plus its adapter (float32 logits within
1e-4), loads offline with `AutoModelForCausalLM` and `AutoTokenizer`, carries the family's EOS
ids, keeps a multimodal checkpoint's towers; a full-weight checkpoint exports without a merge;
an adapter exports as the PEFT folder peft loads onto its base; exports are written atomically
and never replace a folder unasked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from export_models import full_checkpoint, logits, lora_checkpoint, with_adapter
from tiny_families import SHAPES, VARIANTS

from retrain.backends.export import EXPORT_RECORD, BaseModel, ExportRequest
from retrain.backends.local.export import hf as hf_writer
from retrain.backends.local.export.run import export
from retrain.errors import UserError
from retrain.models.families import family_of
from retrain.models.load import ModelSpec, load_model, load_tokenizer
from retrain.models.tiny import from_tiny

TEXTS = ["12+7=", "a b\nc\td", "<|im_end|><end_of_turn>x"]


def request(weights: Path, base: str, out: Path, **kw: object) -> ExportRequest:
    lora = (weights / "adapter_config.json").is_file()
    return ExportRequest(weights, lora, BaseModel(base, seed=0), str(kw.pop("format", "hf")), out, **kw)  # type: ignore[arg-type]


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def towers(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor but the text model's (either layout transformers saves it in)."""
    text = ("model.language_model.", "language_model.", "lm_head.")
    return {k: v for k, v in tensors(folder).items() if not k.startswith(text)}


@pytest.mark.parametrize("name", sorted(SHAPES) + sorted(VARIANTS))
def test_each_family_exports_as_its_base_plus_the_adapter(name: str, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base, checkpoint, wrapped = lora_checkpoint(name, tmp_path)
    out = tmp_path / "export"
    export(request(checkpoint, str(base), out))
    exported = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32, local_files_only=True).eval()
    want = logits(wrapped)
    torch.testing.assert_close(logits(exported), want, rtol=0, atol=1e-4)
    plain = load_model(ModelSpec(str(base)), seed=0).eval()
    assert (logits(plain) - want).abs().max() > 1e-2  # the adapter moves the logits: a merge that drops it fails
    tokenizer, source = AutoTokenizer.from_pretrained(str(out), local_files_only=True), load_tokenizer(ModelSpec(str(base)))
    assert [tokenizer(t).input_ids for t in TEXTS] == [source(t).input_ids for t in TEXTS]
    generation = json.loads((out / "generation_config.json").read_text())
    eos = generation["eos_token_id"] if isinstance(generation["eos_token_id"], list) else [generation["eos_token_id"]]
    vocab = source.get_vocab()
    stops = [vocab[t] for t in family_of(plain.config).end_of_turn if t in vocab]
    assert eos[0] == source.eos_token_id and set(stops) <= set(eos)
    if name.endswith("multimodal"):  # the towers as shipped, beside the trained text weights
        kept, shipped = towers(out), towers(base)
        assert kept and kept.keys() == shipped.keys()
        assert all(torch.equal(kept[k], shipped[k]) for k in kept)


@pytest.mark.parametrize("name", ["qwen3", "gemma3 multimodal"])
def test_full_weights_export_without_a_merge(name: str, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    base, checkpoint, trained = full_checkpoint(name, tmp_path)
    out = tmp_path / "export"
    export(request(checkpoint, str(base), out))
    exported = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32, local_files_only=True).eval()
    torch.testing.assert_close(logits(exported), logits(trained), rtol=0, atol=1e-4)
    assert not any(".lora_" in k or "base_layer" in k for k in tensors(out))
    record = json.loads((out / EXPORT_RECORD).read_text())
    assert record["lora"] is False and record["format"] == "hf"
    if name.endswith("multimodal"):
        assert towers(out).keys() == towers(base).keys()


def test_dtype_and_shards(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    base, checkpoint, wrapped = lora_checkpoint("qwen3", tmp_path)
    out = tmp_path / "export"
    result = export(request(checkpoint, str(base), out, dtype="bfloat16", max_shard_size="40KB"))
    shards = sorted(out.glob("model-*.safetensors"))
    assert len(shards) > 1 and (out / "model.safetensors.index.json").is_file()
    assert all(v.dtype == torch.bfloat16 for v in tensors(out).values())
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    assert any("bfloat16" in note for note in result.notes)
    exported = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32, local_files_only=True).eval()
    assert (logits(exported) - logits(wrapped)).abs().max() < 0.05  # bfloat16's 8 bits of mantissa


def test_the_adapter_exports_as_the_peft_folder_of_its_base(tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base, checkpoint, wrapped = lora_checkpoint("llama", tmp_path)
    out = tmp_path / "adapter"
    export(request(checkpoint, str(base), out, format="adapter"))
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors", EXPORT_RECORD]
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(base) and config["inference_mode"] is True
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32), str(out))
    torch.testing.assert_close(logits(loaded.eval()), logits(wrapped), rtol=0, atol=1e-5)


def test_a_tiny_export_reads_no_instructions_and_loads_offline(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from retrain.backends.local.checkpointing import save_weights

    wrapped = with_adapter(load_model(ModelSpec("tiny"), seed=3))
    save_weights(wrapped, tmp_path / "final", lora=True)
    with pytest.raises(UserError, match="no seed is recorded"):
        export(ExportRequest(tmp_path / "final", True, BaseModel("tiny"), "hf", tmp_path / "none"))
    out = tmp_path / "export"
    export(ExportRequest(tmp_path / "final", True, BaseModel("tiny", seed=3), "hf", out))
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    tokenizer = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "3+5="}], add_generation_prompt=True,
                                           tokenize=True, return_dict=False)
    assert prompt == [1, 4, 9, 78, 11, 86, 5]  # <bos><|user|>3+5=<|assistant|>
    record = json.loads((out / EXPORT_RECORD).read_text())
    assert record["reads_instructions"] is False and record["base_model"] == {"name": "tiny", "revision": "", "seed": 3}
    assert from_tiny(str(out)) and not from_tiny(str(tmp_path))
    with pytest.raises(UserError, match="built-in 'tiny'"):
        export(ExportRequest(tmp_path / "final", True, BaseModel("tiny", seed=3), "adapter", tmp_path / "adapter"))


def test_an_export_never_replaces_a_folder_unasked_and_leaves_nothing_when_it_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base, checkpoint, _ = lora_checkpoint("qwen3", tmp_path)
    out = tmp_path / "export"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(UserError, match="exists"):
        export(request(checkpoint, str(base), out))
    assert [p.name for p in out.iterdir()] == ["mine.txt"]

    def broken(*args: object, **kwargs: object) -> None:
        (args[1] / "config.json").write_text("{}")  # type: ignore[operator]
        raise RuntimeError("disk full")

    monkeypatch.setattr(hf_writer, "write_hf", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        export(request(checkpoint, str(base), out, force=True))
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "checkpoint_step_2", "export"]  # no temp folder
    monkeypatch.undo()
    export(request(checkpoint, str(base), out, force=True))
    assert not (out / "mine.txt").exists() and (out / "config.json").is_file()


def test_refusals_name_the_culprit(tmp_path: Path) -> None:
    base, checkpoint, _ = full_checkpoint("qwen3", tmp_path)
    with pytest.raises(UserError, match="full model's weights"):
        export(request(checkpoint, str(base), tmp_path / "a", format="adapter"))
    with pytest.raises(UserError, match="--format 'onnx' is not one of hf, adapter, gguf"):
        export(request(checkpoint, str(base), tmp_path / "b", format="onnx"))
    with pytest.raises(UserError, match="--dtype 'float8' is not one of"):
        export(request(checkpoint, str(base), tmp_path / "c", dtype="float8"))
    from retrain.backends.local.checkpointing import save_weights

    save_weights(with_adapter(load_model(ModelSpec("tiny"), seed=0)), tmp_path / "tiny", lora=True)
    with pytest.raises(UserError, match="the adapter does not fit the base model"):
        export(request(tmp_path / "tiny", str(base), tmp_path / "d"))  # tiny's 128-wide adapter onto a 32-wide base
    assert not any(p.name.startswith((".a", ".b", ".c", ".d")) for p in tmp_path.iterdir())
