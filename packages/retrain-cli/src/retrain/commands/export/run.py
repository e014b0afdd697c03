"""`retrain export SOURCE --out DIR [--format hf|adapter|gguf] [--dtype D] [--gguf-type T]
[--checkpoint NAME] [--base MODEL] [--seed N] [--max-shard-size S] [--verify] [--force] [--json]`:
a run's trained weights as what other tools load (docs/export.md).

This module finds the weights and their base without torch (`source`), and hands the writing
to the exporter of the backend that trained them (`BackendDefinition.export`), reached through
the backend catalog like `retrain serve`'s engine; torch is imported there, when it runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from retrain.backends.export import FORMATS, ExportCheckFailed, ExportRequest, ExportResult
from retrain.commands.errors import CommandFailed
from retrain.commands.export.source import Source, resolve
from retrain.errors import UserError


def exporter(source: Source) -> Any:
    """The export function of the backend that trained the weights (of any installed backend
    that exports, for a folder with no run)."""
    from retrain.backends import catalog
    from retrain.registry.core import load_target

    if source.backend:
        entry = catalog.lookup(source.backend)
        if entry is None or not entry.runnable:
            raise UserError(f"the run's backend {source.backend!r} is not installed here",
                            hint=entry.definition.hint if entry is not None and entry.definition.hint else "")
        if not entry.definition.export:
            raise UserError(f"backend {source.backend!r} keeps no weights here that retrain export can write "
                            "(its checkpoints live on its service)")
        return load_target(entry.definition.export, source.backend)
    for entry in catalog.all_entries():
        if entry.runnable and entry.definition.export:
            return load_target(entry.definition.export, entry.name)
    raise UserError("no installed backend exports weights", hint="pip install retrain-backends-local")


def _refuse_records(folder: Path) -> None:
    """A checkpoint that records where a service keeps the weights holds none to export."""
    from retrain.backends import catalog

    for entry in catalog.all_entries():
        record = entry.definition.checkpoint_record
        if record and (folder / record).is_file():
            raise UserError(f"{folder} holds {record}, a record of weights kept by backend {entry.name!r}'s "
                            "service, not weights: retrain export writes weights that are on this machine")


def _check_out(out: Path, source: Source, force: bool) -> None:
    target, weights = out.resolve(), source.weights.resolve()
    if target == weights or target.is_relative_to(weights) or weights.is_relative_to(target):
        raise UserError(f"--out {out} overlaps the weights it exports ({source.weights})",
                        hint="write the export to a folder of its own")
    if out.exists() and not force:
        raise UserError(f"--out {out} exists", hint="--force replaces it")


#: each format's own options: set with another format, one is refused (it would change nothing)
OWN_OPTIONS = {"--dtype": ("hf", "adapter"), "--gguf-type": ("gguf",), "--max-shard-size": ("hf",)}


def _check_options(format: str, given: dict[str, object]) -> None:
    if format not in FORMATS:
        raise UserError(f"--format {format!r} is not one of {', '.join(FORMATS)}")
    for flag, value in given.items():
        if value is not None and format not in OWN_OPTIONS[flag]:
            raise UserError(f"{flag} {value} applies to --format {' and '.join(OWN_OPTIONS[flag])}, not {format}",
                            hint=f"remove {flag}")


def run(source_path: str, *, out: str, format: str = "hf", dtype: str | None = None, gguf_type: str | None = None,
        checkpoint: str | None = None, base: str | None = None, seed: int | None = None,
        max_shard_size: str | None = None, verify: bool = False, force: bool = False, as_json: bool = False) -> None:
    _check_options(format, {"--dtype": dtype, "--gguf-type": gguf_type, "--max-shard-size": max_shard_size})
    if verify and format == "adapter":
        raise UserError("--verify reads back a model export (hf or gguf); an adapter is checked by loading it "
                        "onto its base", hint="remove --verify")
    source = resolve(source_path, checkpoint=checkpoint, base=base, seed=seed)
    _refuse_records(source.weights)
    target = Path(out)
    _check_out(target, source, force)
    write = exporter(source)
    assert source.base is not None
    request = ExportRequest(source.weights, source.lora, source.base, format, target, dtype=dtype or "auto",
                            gguf_type=gguf_type or "f16", max_shard_size=max_shard_size or "5GB", force=force,
                            verify=verify, provenance=source.provenance)
    try:
        result: ExportResult = write(request)
    except ExportCheckFailed as exc:
        raise CommandFailed(f"{exc}; nothing was written to {out}") from None
    if as_json:
        print(json.dumps({"out": str(result.out), "format": format, "source": str(source.weights),
                          "base_model": source.base.name, "lora": source.lora, "files": list(result.files),
                          "notes": list(result.notes)}, indent=2))
        return
    what = "LoRA adapter" if source.lora else "full weights"
    print(f"exported {source.weights} ({what} on {source.base.name}) as {format} to {result.out}")
    for note in result.notes:
        print(f"  {note}")
    print(f"  load it: {usage(format, result, source)}")


def usage(format: str, result: ExportResult, source: Source) -> str:
    out = result.out
    if format == "adapter":
        assert source.base is not None
        return f"vllm serve {source.base.name} --enable-lora --lora-modules {out.name}={out}"
    if format == "gguf":
        gguf = next((f for f in result.files if f.endswith(".gguf")), "")
        return f"llama-cli -m {out / gguf}  (or [model] model = \"{out}\")"
    return f"AutoModelForCausalLM.from_pretrained(\"{out}\"), or vllm serve {out}"
