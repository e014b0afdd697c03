"""A PEFT LoRA adapter folder (`adapter_model.safetensors` + `adapter_config.json`) read and
written with numpy alone, so squeezing works on a machine without torch (an adapter trained
on Tinker, a laptop).

safetensors is an 8-byte little-endian header length, a JSON header {name: {dtype, shape,
data_offsets}}, then the raw little-endian tensor bytes. numpy has no bfloat16: BF16 tensors
are widened to float32 exactly (the high half of a float32) and narrowed back with
round-to-nearest-even when written.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from retrain.errors import UserError
from retrain.io import layout
from retrain.io.atomic import write_bytes_atomic, write_text_atomic

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
_NUMPY = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}
_HEADER_MAX = 100 << 20


class AdapterError(UserError, ValueError):
    """The adapter folder is missing, unreadable, or of a kind squeeze does not handle."""


@dataclass
class Tensor:
    dtype: str  # the safetensors dtype it was stored as
    value: np.ndarray


@dataclass
class LoraPair:
    """One adapted module: `a` is lora_A.weight (r x in), `b` is lora_B.weight (out x r)."""

    module: str
    a: np.ndarray
    b: np.ndarray

    @property
    def rank(self) -> int:
        return int(self.a.shape[0])


@dataclass
class Adapter:
    folder: Path
    config: dict[str, Any]
    tensors: dict[str, Tensor]
    metadata: dict[str, str] = field(default_factory=dict)

    def pairs(self) -> list[LoraPair]:
        """Modules with both factors, sorted by name (unpaired tensors are left alone)."""
        out = []
        for name in sorted(self.tensors):
            if ".lora_A." not in name:
                continue
            partner = name.replace(".lora_A.", ".lora_B.")
            if partner in self.tensors:
                module = name.split(".lora_A.")[0]
                out.append(LoraPair(module, self.tensors[name].value, self.tensors[partner].value))
        return out

    @property
    def weight_dtype(self) -> str:
        return next((t.dtype for n, t in self.tensors.items() if ".lora_A." in n), "F32")


def resolve_folder(path: str | Path) -> Path:
    """The adapter folder: `path` itself, or its `final/` (a run's adapter_path)."""
    folder = Path(path)
    if str(path).startswith("tinker://"):
        raise AdapterError(f"{path}: squeezing a Tinker checkpoint is not built yet in this version",
                           hint="download it first and point adapter_path at the folder")
    if (folder / WEIGHTS).is_file():
        return folder
    if (folder / layout.FINAL / WEIGHTS).is_file():
        return folder / layout.FINAL
    raise AdapterError(f"{path}: no {WEIGHTS} there (nor in its {layout.FINAL}/)",
                       hint="point adapter_path at a PEFT adapter folder, e.g. <adapter_path>/final")


def read_safetensors(path: Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    data = path.read_bytes()
    if len(data) < 8:
        raise AdapterError(f"{path}: not a safetensors file (too short)")
    (size,) = struct.unpack("<Q", data[:8])
    if size > min(_HEADER_MAX, len(data) - 8):
        raise AdapterError(f"{path}: not a safetensors file (header length {size})")
    try:
        header = json.loads(data[8:8 + size])
    except ValueError as exc:
        raise AdapterError(f"{path}: unreadable safetensors header ({exc})") from None
    body = memoryview(data)[8 + size:]
    metadata = header.pop("__metadata__", None) or {}
    tensors = {}
    for name, info in header.items():
        dtype, shape, (begin, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
        raw = body[begin:end]
        if dtype == "BF16":
            value = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype in _NUMPY:
            value = np.frombuffer(raw, dtype=np.dtype(_NUMPY[dtype]).newbyteorder("<"))
        else:
            raise AdapterError(f"{path}: tensor {name} has dtype {dtype}, which squeeze does not read")
        tensors[name] = Tensor(dtype, value.reshape(shape).copy())
    return tensors, metadata


def _encode(tensor: Tensor) -> bytes:
    if tensor.dtype == "BF16":
        bits = np.ascontiguousarray(tensor.value, dtype=np.float32).view(np.uint32)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest, ties to even
        return rounded.astype("<u2").tobytes()
    return np.ascontiguousarray(tensor.value, dtype=np.dtype(_NUMPY[tensor.dtype]).newbyteorder("<")).tobytes()


def write_safetensors(path: Path, tensors: dict[str, Tensor], metadata: dict[str, str]) -> None:
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    chunks, offset = [], 0
    for name in sorted(tensors):
        raw = _encode(tensors[name])
        header[name] = {"dtype": tensors[name].dtype, "shape": list(tensors[name].value.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the format aligns the data to 8 bytes
    write_bytes_atomic(path, struct.pack("<Q", len(text)) + text + b"".join(chunks))


def read_adapter(path: str | Path) -> Adapter:
    folder = resolve_folder(path)
    config_file = folder / CONFIG
    try:
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    except ValueError as exc:
        raise AdapterError(f"{config_file}: not JSON ({exc})") from None
    if config.get("use_dora"):
        raise AdapterError(f"{folder}: squeezing a DoRA adapter is not built yet in this version")
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        raise AdapterError(f"{folder}: squeezing per-module ranks (rank_pattern / alpha_pattern) is not built yet "
                           "in this version")
    tensors, metadata = read_safetensors(folder / WEIGHTS)
    return Adapter(folder, config, tensors, metadata)


def write_adapter(adapter: Adapter, folder: str | Path) -> Path:
    out = Path(folder)
    write_safetensors(out / WEIGHTS, adapter.tensors, adapter.metadata)
    write_text_atomic(out / CONFIG, json.dumps(adapter.config, indent=2, sort_keys=True) + "\n")
    return out
