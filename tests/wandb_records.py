"""Reading back a W&B offline run (`<dir>/wandb/offline-run-*/run-*.wandb`) with wandb's own
record protobuf: the file is W&B's header (`:W&B`, a magic number, a version byte) then
LevelDB-log framed records (32 KiB blocks; each chunk a 7-byte header: CRC32, length, type
full/first/middle/last), each record a `wandb_internal_pb2.Record`."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK = 32768
HEADER = 7  # ":W&B" + magic (2 bytes) + version (1 byte)


def records(path: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    out, pending, pos = [], b"", HEADER
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a chunk header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            break
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


def offline_run(log_dir: Path, *, wait_s: float = 60.0) -> Path:
    """The run's file once it holds its `exit` record. wandb's service process writes the file
    and may still be flushing it when the run's own process has exited (seen on a loaded
    machine: the file without its history records yet)."""
    import time

    [run] = list((log_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    deadline = time.monotonic() + wait_s
    while not _has_exit(run):
        assert time.monotonic() < deadline, f"{run} has no exit record after {wait_s:.0f} s"
        time.sleep(0.2)
    return run


def _has_exit(run: Path) -> bool:
    try:
        return any(r.WhichOneof("record_type") == "exit" for r in records(run))
    except Exception:  # a record still being written does not parse yet
        return False


def history(path: Path) -> list[dict[str, Any]]:
    """Each logged row: {key: value} with `_step`."""
    rows = []
    for r in records(path):
        if r.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in r.history.item})
    return rows


def summary(path: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in records(path):
        if r.WhichOneof("record_type") == "summary":
            out.update({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                        for item in r.summary.update})
    return out


def artifacts(path: Path) -> list[Any]:
    return [r.artifact for r in records(path) if r.WhichOneof("record_type") == "artifact"]
