"""`--format gguf`: the trained text model as one GGUF file, through the gguf package's writer.

Weight matrices are stored as the chosen type, `f16` or `q8_0` (quantised by the gguf
package's own `gguf.quants.quantize`, llama.cpp's Q8_0: blocks of 32 values sharing one f16
scale); a matrix whose rows are not a whole number of blocks stays f16, as llama.cpp's
converter leaves it. Norms and biases stay float32. The output head is written only when it
is not tied to the embeddings. The file's vocabulary is the tokenizer's
(`retrain.backends.local.export.gguf.vocab`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from retrain.backends.local.export.gguf.arch import Arch, arch_of, stored, write_metadata
from retrain.backends.local.export.gguf.vocab import vocab_of, write_vocab
from retrain.backends.local.export.hf import eos_ids
from retrain.backends.local.export.model import Trained
from retrain.errors import UserError


def require_gguf() -> None:
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise UserError("--format gguf needs the gguf package",
                        hint="uv sync --extra gguf (or pip install 'retrain-backends-local[gguf]')") from None


def gguf_name(gguf_type: str) -> str:
    return f"model-{gguf_type}.gguf"


def check_writable(trained: Trained) -> Arch:
    """The architecture to write; UserError for a model or tokenizer GGUF cannot hold, raised
    before any file is written."""
    require_gguf()
    arch = arch_of(trained.text.config, trained.multimodal)
    vocab_of(trained.tokenizer, arch.gguf_arch, int(trained.text.config.vocab_size))
    return arch


def write_gguf(trained: Trained, out: Path, *, gguf_type: str, name: str) -> list[str]:
    """`out/model-<type>.gguf`; the notes for the user."""
    import gguf

    arch = check_writable(trained)
    config = trained.text.config
    vocab = vocab_of(trained.tokenizer, arch.gguf_arch, int(config.vocab_size))
    path = out / gguf_name(gguf_type)
    writer = gguf.GGUFWriter(str(path), arch=arch.gguf_arch)
    write_metadata(writer, arch, config, name)
    ftype = gguf.LlamaFileType.MOSTLY_Q8_0 if gguf_type == "q8_0" else gguf.LlamaFileType.MOSTLY_F16
    writer.add_file_type(ftype)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    write_vocab(writer, trained.tokenizer, vocab, _eot(trained))
    kept_f16 = add_tensors(writer, trained.text, arch, gguf_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    notes = [f"{path.name}: llama.cpp architecture {arch.gguf_arch}, weights {gguf_type}, "
             f"{vocab.model} vocabulary of {len(vocab.tokens)} tokens", *vocab.notes]
    if kept_f16:
        notes.append(f"{len(kept_f16)} matrices kept in f16 (rows not a multiple of 32): {', '.join(kept_f16[:3])}")
    return notes


def _eot(trained: Trained) -> int | None:
    """The family's end-of-turn token where it is not the tokenizer's eos (llama.cpp stops
    generation at both)."""
    extra = [i for i in eos_ids(trained) if i != trained.tokenizer.eos_token_id]
    return extra[0] if extra else None


def add_tensors(writer: Any, model: Any, arch: Arch, gguf_type: str) -> list[str]:
    """Every tensor of the text model under llama.cpp's name; the names of matrices that
    stayed f16 under q8_0."""
    import gguf

    config = model.config
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.gguf_arch.upper()], config.num_hidden_layers)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    kept_f16 = []
    for key, tensor in model.state_dict().items():
        if key == "lm_head.weight" and tied:
            continue
        name = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise UserError(f"--format gguf: the model's tensor {key} has no name in llama.cpp's "
                            f"{arch.gguf_arch} architecture")
        data = stored(key, tensor.detach().float().cpu().numpy(), arch, config)
        if data.ndim < 2:
            writer.add_tensor(name, data.astype(np.float32))
        elif gguf_type == "q8_0" and data.shape[-1] % gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_0][0] == 0:
            raw = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(name, raw, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            if gguf_type == "q8_0":
                kept_f16.append(name)
            writer.add_tensor(name, data.astype(np.float16))
    return kept_f16
