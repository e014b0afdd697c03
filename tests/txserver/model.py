"""The tiny Qwen3 the test server serves, written as a checkpoint folder both transformers 4
(skyrl-tx's side) and transformers 5 (retrain's side) read: retrain's built-in `tiny` config
and character tokenizer, with weights drawn from a seeded numpy generator (no torch)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from retrain.models.tiny import ASSETS


def _shapes(c: dict[str, int]) -> dict[str, tuple[int, ...]]:
    h, hd, inter = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c["vocab_size"], h), "model.norm.weight": (h,)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
            p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
        })
    return shapes


def build(path: Path, seed: int = 0) -> Path:
    """Write the model folder at `path` (config, safetensors weights, tokenizer)."""
    path.mkdir(parents=True, exist_ok=True)
    config = json.loads((ASSETS / "config.json").read_text())
    config["torch_dtype"] = "float32"
    (path / "config.json").write_text(json.dumps(config, indent=2))
    rng = np.random.default_rng(seed)
    weights = {name: (np.ones(shape, np.float32) if len(shape) == 1
                      else rng.normal(0.0, 0.02, shape).astype(np.float32))
               for name, shape in _shapes(config).items()}
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(ASSETS / "tokenizer.json", path / "tokenizer.json")
    template = (ASSETS / "chat_template.jinja").read_text()
    (path / "chat_template.jinja").write_text(template)
    tok = json.loads((ASSETS / "tokenizer_config.json").read_text())
    # transformers 4 has no TokenizersBackend class; the fast tokenizer reads the same file
    tok.update({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template})
    tok.pop("backend", None)
    (path / "tokenizer_config.json").write_text(json.dumps(tok, indent=2))
    return path
