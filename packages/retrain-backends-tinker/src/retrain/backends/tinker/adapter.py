"""Downloading sampler weights from the service into a folder `peft.PeftModel.from_pretrained`
loads: `adapter_model.safetensors` and a complete `adapter_config.json`.

The service serves a sampler checkpoint as a tar archive at
`GET /api/v1/training_runs/<run>/checkpoints/<name>/archive` (a redirect to the bytes). Its
`adapter_config.json` may leave `target_modules` unset, which peft would fill with the
architecture's defaults and then silently drop the other modules' weights; the modules are
read back from the weights' names instead.

The download is one request through `retrain.io.http.request`: the whole of it (the redirect
included) within the backend's call timeout, the archive at most `MAX_ARCHIVE_BYTES`, streamed
to a temporary file rather than held in memory; the service's API key does not follow the
redirect to another host.
"""

from __future__ import annotations

import json
import struct
import tarfile
import tempfile
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from retrain.backends.tinker.runtime import Service, TinkerError, base_url, describe_failure
from retrain.io.atomic import write_dir_atomic

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
SOURCE = "tinker_adapter.json"  # beside the adapter: where on the service it came from
#: a LoRA of a large model at a high rank is a few GB
MAX_ARCHIVE_BYTES = 16 << 30


def split_path(tinker_path: str) -> tuple[str, str]:
    """(run id, checkpoint name) of `tinker://<run>/[sampler_weights/]<name>`."""
    parts = urlsplit(tinker_path)
    name = parts.path.rstrip("/").rsplit("/", 1)[-1]
    if parts.scheme != "tinker" or not parts.netloc or not name:
        raise TinkerError(f"not a Tinker checkpoint path: {tinker_path!r}")
    return parts.netloc, name


def lora_modules(weights: Path) -> list[str]:
    """Module names that carry LoRA weights, from the safetensors header (no tensor read)."""
    with open(weights, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    modules = set()
    for key in header:
        for marker in (".lora_A", ".lora_B", ".lora_embedding_A", ".lora_embedding_B"):
            if marker in key:
                modules.add(key.split(marker)[0].rsplit(".", 1)[-1])
    return sorted(modules)


def complete_config(folder: Path, base_model: str, rank: int) -> None:
    path = folder / CONFIG
    config: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    config.setdefault("peft_type", "LORA")
    config.setdefault("task_type", "CAUSAL_LM")
    config["r"] = config.get("r") or rank
    config.setdefault("lora_alpha", 32)
    config["base_model_name_or_path"] = config.get("base_model_name_or_path") or base_model
    if not config.get("target_modules"):
        config["target_modules"] = lora_modules(folder / WEIGHTS)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def download(svc: Service, tinker_path: str, dest: str | Path, *, base_model: str, rank: int,
             timeout_s: float) -> Path:
    """Fetch the sampler checkpoint `tinker_path` into `dest` (atomically)."""
    from retrain.io.http import HttpFailure, request

    run, name = split_path(tinker_path)
    url = f"{base_url(svc)}/api/v1/training_runs/{run}/checkpoints/{name}/archive"
    with tempfile.TemporaryFile() as archive:
        try:
            reply = request("GET", url, headers={"X-API-Key": svc.key.value}, deadline_s=timeout_s,
                            max_bytes=MAX_ARCHIVE_BYTES, max_redirects=5, into=archive)
        except HttpFailure as exc:
            raise TinkerError(f"downloading {tinker_path} from {svc.where} failed: "
                              f"{describe_failure(exc, svc.key)}") from None
        if reply.status != 200:
            raise TinkerError(f"downloading {tinker_path} from {svc.where} failed: HTTP {reply.status}")
        archive.seek(0)
        return write_dir_atomic(dest, lambda tmp: _unpack(archive, tmp, tinker_path, base_model, rank))


def _unpack(archive: IO[bytes], tmp: Path, tinker_path: str, base_model: str, rank: int) -> None:
    with tarfile.open(fileobj=archive, mode="r:*") as tar:
        tar.extractall(tmp, filter="data")
    found = next(tmp.rglob(WEIGHTS), None)
    if found is None:
        raise TinkerError(f"the archive of {tinker_path} holds no {WEIGHTS}")
    if found.parent != tmp:
        for item in found.parent.iterdir():
            item.rename(tmp / item.name)
    complete_config(tmp, base_model, rank)
    (tmp / SOURCE).write_text(json.dumps({"tinker_path": tinker_path, "base_model": base_model}, indent=2) + "\n")
