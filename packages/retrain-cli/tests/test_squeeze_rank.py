"""LoRA-Squeeze math and adapter IO with numpy alone (spec algorithms.md §14)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from retrain.config.schema import SqueezeConfig
from retrain.squeeze.adapter import Tensor, read_adapter, read_safetensors, write_safetensors
from retrain.squeeze.rank import (
    decompose,
    default_targets,
    recommend,
    rescaled_alpha,
    retained,
    truncate,
)
from retrain.squeeze.run import analyse, format_table, squeeze_to


def test_worked_example() -> None:
    """A=[[1,0],[0,1],[0,0]], B=[[3,0,0],[0,4,0]]: S=[4,3], V(1)=.64, V(2)=1, rank 2 at .95;
    rank 1 keeps [[0,0,0],[0,4,0],[0,0,0]]."""
    a = np.array([[1.0, 0], [0, 1], [0, 0]])  # in x r
    b = np.array([[3.0, 0, 0], [0, 4, 0]])  # r x out
    f = decompose(a.T, b.T)  # stored as lora_A (r x in), lora_B (out x r)
    assert f.s == pytest.approx([4, 3])
    assert retained(f.s, 1) == pytest.approx(0.64) and retained(f.s, 2) == 1.0
    assert recommend({1: 0.64, 2: 1.0}, 0.95, 2) == 2
    lora_a, lora_b = truncate(f, 1)
    assert pytest.approx(np.array([[0, 0, 0], [0, 4, 0], [0, 0, 0]])) == (lora_a.T @ lora_b.T)
    assert rescaled_alpha(64, 128, 32, rslora=False) == 16


def test_defaults_and_zero_update() -> None:
    assert default_targets(128) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert default_targets(6) == [1, 2, 4, 6]
    f = decompose(np.zeros((4, 8)), np.zeros((5, 4)))
    assert retained(f.s, 1) == 1.0
    assert recommend({1: 0.5, 2: 0.9}, 0.95, 4) == 4


def test_truncation_is_the_best_low_rank_approximation() -> None:
    rng = np.random.default_rng(0)
    lora_a, lora_b = rng.normal(size=(8, 20)), rng.normal(size=(12, 8))
    f = decompose(lora_a, lora_b)
    u, s, vt = np.linalg.svd(lora_b @ lora_a)
    assert f.s == pytest.approx(s[:8])
    for k in (1, 3, 8):
        a_k, b_k = truncate(f, k)
        assert b_k @ a_k == pytest.approx((u[:, :k] * s[:k]) @ vt[:k])
    a_wide, b_wide = truncate(decompose(lora_a[:2], lora_b[:, :2]), 4)  # rank-2 module padded to 4
    assert a_wide.shape == (4, 20) and b_wide.shape == (12, 4) and not a_wide[2:].any()


def test_safetensors_round_trip_with_bf16(tmp_path: Path) -> None:
    values = np.array([[1.0, -2.5, 3.140625], [0.0, 1e-3, 65504.0]], dtype=np.float32)
    path = tmp_path / "t.safetensors"
    write_safetensors(path, {"x": Tensor("BF16", values), "y": Tensor("F32", values), "z": Tensor("F16", values)},
                      {"format": "pt"})
    tensors, meta = read_safetensors(path)
    assert meta == {"format": "pt"}
    assert tensors["y"].value.dtype == np.float32 and (tensors["y"].value == values).all()
    assert tensors["x"].dtype == "BF16"
    assert tensors["x"].value == pytest.approx(values, rel=2**-8)  # bf16 keeps 8 significant bits
    (size,) = struct.unpack("<Q", path.read_bytes()[:8])
    assert size % 8 == 0


def write_peft(folder: Path, rank: int, alpha: int, modules: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tensors = {}
    for i in range(modules):
        prefix = f"base_model.model.layers.{i}.q_proj"
        tensors[f"{prefix}.lora_A.weight"] = rng.normal(size=(rank, 16)).astype(np.float32)
        tensors[f"{prefix}.lora_B.weight"] = rng.normal(size=(10, rank)).astype(np.float32) * (0.5 ** np.arange(rank))
    folder.mkdir(parents=True)
    write_safetensors(folder / "adapter_model.safetensors", {k: Tensor("F32", v) for k, v in tensors.items()}, {})
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "lora_alpha": alpha, "peft_type": "LORA"}))
    return tensors


def test_squeeze_keeps_the_scale_exactly(tmp_path: Path) -> None:
    """alpha 6 at r 4 -> rank 3: alpha*3/4 = 4.5 rounds to 4 (an integer for PEFT) and the
    rest of the scale is folded into the factors: scale'·B'·A' = the best rank-3
    approximation of scale·B·A."""
    tensors = write_peft(tmp_path / "a" / "final", rank=4, alpha=6)
    analysis = analyse(tmp_path / "a", SqueezeConfig())  # a run's adapter_path: final/ is found
    assert analysis.source_rank == 4 and sorted(analysis.table) == [1, 2, 4]
    assert "<--" in format_table(analysis)
    squeeze_to(analysis, 3, tmp_path / "out")
    out = read_adapter(tmp_path / "out")
    assert out.config["r"] == 3 and out.config["lora_alpha"] == 4
    for i in range(3):
        prefix = f"base_model.model.layers.{i}.q_proj"
        delta = 6 / 4 * tensors[f"{prefix}.lora_B.weight"].astype(np.float64) @ tensors[f"{prefix}.lora_A.weight"]
        u, s, vt = np.linalg.svd(delta)
        new = 4 / 3 * out.tensors[f"{prefix}.lora_B.weight"].value.astype(np.float64) @ \
            out.tensors[f"{prefix}.lora_A.weight"].value
        assert new == pytest.approx((u[:, :3] * s[:3]) @ vt[:3], abs=1e-5)


def test_refusals(tmp_path: Path) -> None:
    from retrain.errors import UserError

    write_peft(tmp_path / "a", rank=4, alpha=8)
    with pytest.raises(UserError, match="has rank 4"):
        analyse(tmp_path / "a", SqueezeConfig(source_rank=8))
    with pytest.raises(UserError, match=r"target_ranks \[8\]"):
        analyse(tmp_path / "a", SqueezeConfig(target_ranks=[2, 8]))
    with pytest.raises(UserError, match=r"no adapter_model\.safetensors"):
        analyse(tmp_path / "missing", SqueezeConfig())
    config = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    (tmp_path / "a" / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(UserError, match="DoRA"):
        analyse(tmp_path / "a", SqueezeConfig())
