"""The optimizer-batch artifact: the exact inputs and outputs of one optimizer step.

Layout, in the run's log directory (written by `[optimizer_batch] capture`):

    optimizer_batch_step_000000/
        batch.json        the logical batch: datums (token ids, loss masks, advantages,
                          behaviour logprobs, policy versions), lr, weight_decay
        initial/          the backend checkpoint taken just before the step: trainable
                          weights, optimizer state, RNG streams
        updated/          the weights the step produced (save_adapter)
    optimizer_batch_step_000000.manifest.json

The folder is built under a temporary name and renamed into place; the manifest is written
last, atomically, so an artifact with a manifest is complete. The manifest holds the sha256 of
every file, the captured config (flat, unredacted), the step's loss and the updated weights'
digest. Its own sha256 and `logical_sha256` (of batch.json) are the pins a replay names.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from retrain.config.fields import all_fields, flat_dict
from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.io.atomic import fsync_dir, write_bytes_atomic, write_json_atomic
from retrain.io.digest import file_sha256
from retrain.types import Datum

NAME = "optimizer_batch_step_000000"
MANIFEST_SUFFIX = ".manifest.json"
BATCH = "batch.json"
INITIAL = "initial"
UPDATED = "updated"
SCHEMA = 1
#: config sections and keys a replay may set differently from the capture: where it writes,
#: how it was told to replay, and the trainer itself
_UNCOMPARED_SECTIONS = frozenset({"logging", "resume", "optimizer_batch"})
_UNCOMPARED_KEYS = frozenset({"trainer", "adapter_path"})


class ArtifactError(UserError, ValueError):
    """An artifact that is incomplete, tampered with, or not the one the config pins."""


class LogicalBatch(msgspec.Struct, kw_only=True):
    datums: list[Datum]
    lr: float
    weight_decay: float


def manifest_path(folder: Path) -> Path:
    return folder.with_name(folder.name + MANIFEST_SUFFIX)


def _files(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): file_sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}


class Capture:
    """Begun before the step (the initial state), finished after it (batch, outputs, manifest)."""

    def __init__(self, log_dir: str | Path, backend: Any) -> None:
        self.folder = Path(log_dir) / NAME
        if manifest_path(self.folder).exists():
            raise ArtifactError(f"{manifest_path(self.folder)} already exists; capture into another log_dir")
        self.tmp = self.folder.with_name(f".{NAME}.tmp-{os.getpid()}")
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir(parents=True)
        self.backend = backend
        backend.save_checkpoint(str(self.tmp / INITIAL))

    def finish(self, config: TrainConfig, datums: Sequence[Datum], lr: float, weight_decay: float,
               loss: float) -> dict[str, str]:
        """Write the rest and the manifest; the digests a replay pins."""
        batch = msgspec.json.encode(LogicalBatch(datums=list(datums), lr=lr, weight_decay=weight_decay))
        write_bytes_atomic(self.tmp / BATCH, batch)
        self.backend.save_adapter(str(self.tmp / UPDATED))
        shutil.rmtree(self.folder, ignore_errors=True)
        os.replace(self.tmp, self.folder)
        fsync_dir(self.folder.parent)
        files = _files(self.folder)
        manifest = {"schema_version": SCHEMA, "kind": "retrain_optimizer_batch", "artifact": NAME,
                    "logical_sha256": files[BATCH], "files": files, "loss": loss,
                    "datums": len(datums), "updated_sha256": _weights_digest(files), "config": flat_dict(config)}
        path = manifest_path(self.folder)
        write_json_atomic(path, manifest)
        return {"manifest": str(path), "manifest_sha256": file_sha256(path), "logical_sha256": files[BATCH]}

    def abandon(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def _weights_digest(files: Mapping[str, str]) -> str:
    """One digest over the updated weights' tensor files (names and contents). The JSON beside
    them is left out: PEFT writes `target_modules` from a set, in an order that changes
    between processes."""
    h = hashlib.sha256()
    for name, digest in sorted(files.items()):
        if name.startswith(UPDATED + "/") and name.endswith(".safetensors"):
            h.update(f"{name[len(UPDATED) + 1:]}\0{digest}\n".encode())
    return h.hexdigest()


def weights_digest(folder: Path) -> str:
    return _weights_digest({f"{UPDATED}/{k}": v for k, v in _files(folder).items()})


@dataclass(frozen=True)
class Artifact:
    folder: Path
    manifest: dict[str, Any]
    batch: LogicalBatch

    @property
    def initial(self) -> Path:
        return self.folder / INITIAL


def open_artifact(replay_path: str, *, manifest_sha256: str, logical_sha256: str) -> Artifact:
    """Verify and load; ArtifactError names the file that does not match."""
    path = Path(replay_path)
    if path.is_dir():
        path = manifest_path(path)
    if not path.is_file():
        raise ArtifactError(f"[optimizer_batch] replay_path: {path} is not a capture manifest")
    actual = file_sha256(path)
    if actual != manifest_sha256.strip().lower():
        raise ArtifactError(f"{path}: sha256 {actual} does not match expected_manifest_sha256 "
                            f"{manifest_sha256.strip().lower()}")
    manifest = json.loads(path.read_text())
    folder = path.with_name(path.name[: -len(MANIFEST_SUFFIX)])
    files: dict[str, str] = manifest["files"]
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} if folder.is_dir() else set()
    for extra in sorted(present - set(files)):
        raise ArtifactError(f"{folder / extra}: not in the manifest (the artifact was changed)")
    for name, digest in files.items():
        file = folder / name
        if not file.is_file():
            raise ArtifactError(f"{file}: missing from the artifact")
        if file_sha256(file) != digest:
            raise ArtifactError(f"{file}: sha256 does not match the manifest (the artifact was changed)")
    if manifest["logical_sha256"] != logical_sha256.strip().lower():
        raise ArtifactError(f"{folder / BATCH}: logical sha256 {manifest['logical_sha256']} does not match "
                            f"expected_logical_sha256 {logical_sha256.strip().lower()}")
    batch = msgspec.json.decode((folder / BATCH).read_bytes(), type=LogicalBatch)
    return Artifact(folder, manifest, batch)


def config_difference(captured: Mapping[str, Any], config: TrainConfig, allowed: Sequence[str]) -> str:
    """'' when `config` may replay a capture made with `captured`; else one line naming the key."""
    current = flat_dict(config)
    allowed_options = {a.removeprefix("backend.options.") for a in allowed if a.startswith("backend.options.")}
    for spec in all_fields():
        if spec.section in _UNCOMPARED_SECTIONS or spec.flat in _UNCOMPARED_KEYS:
            continue
        then, now = captured.get(spec.flat), current[spec.flat]
        if isinstance(now, dict) and isinstance(then, dict):
            keys = sorted((set(then) | set(now)) - allowed_options)
            for k in keys:
                if then.get(k) != now.get(k):
                    return (f"[{spec.section}.options] {k}: {then.get(k)!r} when captured, {now.get(k)!r} here "
                            "(allow_config_differences lists what may differ)")
            continue
        if _plain(then) != _plain(now):
            return (f"{spec.label}: {then!r} when captured, {now!r} here "
                    "(a replay must use the captured config; allow_config_differences lists what may differ)")
    return ""


def _plain(value: Any) -> Any:
    """JSON's view of a value (tuples as lists), as the manifest stored it."""
    return json.loads(json.dumps(value, default=str))
