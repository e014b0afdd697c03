"""The export contract between `retrain export` (the CLI, torch-free: it finds the weights and
the model they were trained on) and a backend's exporter (`BackendDefinition.export`, which
loads them and writes the export).

The CLI resolves a run folder, a checkpoint or an adapter folder into an `ExportRequest`; the
exporter writes `out` atomically (built under a temporary name, renamed into place), refuses a
request it cannot honour with a `retrain.errors.UserError` naming the culprit, and answers an
`ExportResult`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: `--format`: a transformers folder (the adapter merged into the base), the PEFT adapter
#: folder, or a GGUF file
FORMATS = ("hf", "adapter", "gguf")
#: `--dtype` of an hf export: the base checkpoint's own dtype ("auto"), or one named
DTYPES = ("auto", "float32", "bfloat16", "float16")
#: `--gguf-type`: GGUF tensor types of the weight matrices (norms and biases stay float32)
GGUF_TYPES = ("f16", "q8_0")
#: what an export folder records about where it came from
EXPORT_RECORD = "retrain_export.json"


@dataclass(frozen=True)
class BaseModel:
    """The model the weights were trained on, as the run's config named it."""

    name: str
    revision: str = ""
    local_files_only: bool = False
    trust_remote_code: bool = False
    #: the seed a model initialised from its seed (the built-in `tiny`) was built with
    seed: int | None = None


@dataclass(frozen=True)
class ExportRequest:
    #: the folder holding the trained weights: a LoRA adapter or the full model's weights
    weights: Path
    lora: bool
    base: BaseModel
    format: str
    out: Path
    dtype: str = "auto"
    gguf_type: str = "f16"
    #: the largest safetensors shard of an hf export ("5GB", "500MB", ...)
    max_shard_size: str = "5GB"
    #: replace an existing `out`
    force: bool = False
    #: read the export back with transformers and compare it with the trained model; a failed
    #: check leaves nothing written (ExportCheckFailed)
    verify: bool = False
    #: written into the export's EXPORT_RECORD (source, run, checkpoint, step)
    provenance: Mapping[str, Any] = field(default_factory=dict)


class ExportCheckFailed(Exception):
    """`verify`: the export, read back, differs from the trained model beyond the check's
    tolerance (its message says how); the CLI exits 1 and nothing is written."""


@dataclass(frozen=True)
class ExportResult:
    out: Path
    #: the files written, relative to `out`
    files: tuple[str, ...]
    #: lines for the user: what the export holds and how to load it
    notes: tuple[str, ...] = ()
