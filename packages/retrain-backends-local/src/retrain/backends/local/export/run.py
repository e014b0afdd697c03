"""The local backend's exporter (`BackendDefinition.export`): an `ExportRequest` made by
`retrain export` written as the format it names, atomically (`retrain.io.atomic`: built under a
temporary name beside `out`, renamed into place), with `retrain_export.json` recording where it
came from. Nothing is written when a check fails or the request is refused, and an existing
`out` is replaced only with `force`.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrain.backends.export import (
    DTYPES,
    EXPORT_RECORD,
    FORMATS,
    GGUF_TYPES,
    ExportCheckFailed,
    ExportRequest,
    ExportResult,
)
from retrain.backends.local.export.adapter import check_adapter, write_adapter
from retrain.backends.local.export.model import Trained, load_trained
from retrain.errors import UserError
from retrain.io.atomic import write_dir_atomic
from retrain.models.tiny import is_tiny

if TYPE_CHECKING:
    from retrain.backends.local.export.check import ReadBack


def check_request(request: ExportRequest) -> None:
    for flag, value, allowed in (("--format", request.format, FORMATS), ("--dtype", request.dtype, DTYPES),
                                 ("--gguf-type", request.gguf_type, GGUF_TYPES)):
        if value not in allowed:
            raise UserError(f"{flag} {value!r} is not one of {', '.join(allowed)}")
    if request.out.exists() and not request.force:
        raise UserError(f"--out {request.out} exists", hint="--force replaces it")


def export(request: ExportRequest) -> ExportResult:
    check_request(request)
    if request.format == "adapter":
        check_adapter(request)
        return _write(request, lambda out: (write_adapter(request, out), None), trained=None)
    trained = load_trained(request.base, request.weights, lora=request.lora, towers=request.format == "hf")
    if request.format == "gguf":
        from retrain.backends.local.export.gguf.write import check_writable

        check_writable(trained)
    return _write(request, lambda out: _write_model(request, trained, out), trained=trained)


def _write_model(request: ExportRequest, trained: Trained, out: Path) -> tuple[list[str], ReadBack | None]:
    from retrain.backends.local.export import check

    reference = check.Reference.of(trained) if request.verify else None
    if request.format == "hf":
        from retrain.backends.local.export.hf import write_hf

        notes = write_hf(trained, out, dtype=request.dtype, max_shard_size=request.max_shard_size)
        readback = None if reference is None else check.read_back_hf(out, reference, multimodal=bool(trained.multimodal))
    else:
        from retrain.backends.local.export.gguf.write import gguf_name, write_gguf

        notes = write_gguf(trained, out, gguf_type=request.gguf_type, name=_name(request))
        readback = None if reference is None else check.read_back_gguf(out / gguf_name(request.gguf_type), reference)
    if readback is not None:
        notes.append(readback.line())
        _require_passing(request, readback, out)
    return notes, readback


def _require_passing(request: ExportRequest, readback: ReadBack, out: Path) -> None:
    """A read-back passes when its tokenizer agrees, the greedy continuation is the same and, for
    a float32 hf export, every logit is within the check's tolerance."""
    from retrain.backends.local.export.check import HF_FLOAT32_TOLERANCE

    problems = []
    if not readback.tokenizer_agrees:
        problems.append("the reader's tokenizer encodes the probe texts differently")
    if readback.greedy_agree < readback.greedy_tokens:
        problems.append(f"greedy tokens differ from the {readback.greedy_agree + 1}th on")
    exact = request.format == "hf" and request.dtype in ("float32", "auto") and _is_float32(out)
    if exact and readback.max_logit_diff > HF_FLOAT32_TOLERANCE:
        problems.append(f"logits differ by {readback.max_logit_diff:.3g} > {HF_FLOAT32_TOLERANCE:g}")
    if problems:
        raise ExportCheckFailed(f"the export read back by {readback.reader} differs from the trained model: "
                                + "; ".join(problems))


def _is_float32(out: Path) -> bool:
    config = json.loads((out / "config.json").read_text())
    return str(config.get("dtype") or config.get("torch_dtype") or "float32") == "float32"


def _write(request: ExportRequest, fill: Callable[[Path], tuple[list[str], ReadBack | None]], *,
           trained: Trained | None) -> ExportResult:
    """`fill(tmp)` writes the export into a temporary folder; the record is added and the
    folder renamed into place. A failure removes the temporary folder and writes nothing."""
    notes: list[str] = []

    def build(tmp: Path) -> None:
        try:
            written, readback = fill(tmp)
            notes.extend(written)
            record = _record(request, trained, readback)
            (tmp / EXPORT_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    out = write_dir_atomic(request.out, build)
    files = tuple(sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()))
    return ExportResult(out, files, tuple(notes))


def _record(request: ExportRequest, trained: Trained | None, readback: ReadBack | None) -> dict[str, Any]:
    base = request.base
    record: dict[str, Any] = {
        "format": request.format,
        "base_model": {"name": base.name, "revision": base.revision, "seed": base.seed},
        "lora": request.lora,
        "weights": str(request.weights.resolve()),
        "exported_by": f"retrain-backends-local {_version()}",
        **({"dtype": _dtype(request, trained)} if request.format != "gguf" else {}),
        **({"gguf_type": request.gguf_type} if request.format == "gguf" else {}),
        "source": dict(request.provenance),
    }
    if is_tiny(base.name):  # retrain poses built-in problems to tiny, and to its exports, as bare questions
        record["reads_instructions"] = False
    if trained is not None and trained.multimodal:
        record["multimodal"] = trained.multimodal
    if readback is not None:
        record["read_back"] = readback.as_dict()
    return record


def _dtype(request: ExportRequest, trained: Trained | None) -> str:
    if trained is None or request.dtype != "auto":
        return request.dtype
    from retrain.backends.local.export.hf import export_dtype

    return str(export_dtype(trained, request.dtype)).removeprefix("torch.")


def _name(request: ExportRequest) -> str:
    run = request.provenance.get("run")
    return str(run or request.weights.name)


def _version() -> str:
    try:
        return metadata.version("retrain-backends-local")
    except metadata.PackageNotFoundError:
        return "unknown"
