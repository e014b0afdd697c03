"""Downloading sampler weights from the service into a folder `peft.PeftModel.from_pretrained`
loads: `adapter_model.safetensors` and a complete `adapter_config.json`.

The service serves a sampler checkpoint as a tar archive at
`GET /api/v1/training_runs/<run>/checkpoints/<name>/archive` (a redirect to the bytes). Its
`adapter_config.json` may leave `target_modules` unset, which peft would fill with the
architecture's defaults and then silently drop the other modules' weights; the modules are
read back from the weights' names instead.
"""

from __future__ import annotations

import io
import json
import struct
import tarfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from retrain.backends.tinker.runtime import Service, TinkerError, base_url, describe_failure
from retrain.io.atomic import write_dir_atomic

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
SOURCE = "tinker_adapter.json"  # beside the adapter: where on the service it came from


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
    import httpx

    run, name = split_path(tinker_path)
    url = f"{base_url(svc)}/api/v1/training_runs/{run}/checkpoints/{name}/archive"
    try:
        response = httpx.get(url, headers={"X-API-Key": svc.key.value}, follow_redirects=True, timeout=timeout_s)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise TinkerError(f"downloading {tinker_path} from {svc.where} failed: "
                          f"{describe_failure(exc, svc.key)}") from exc
    archive = response.content

    def fill(tmp: Path) -> None:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
            tar.extractall(tmp, filter="data")
        found = next(tmp.rglob(WEIGHTS), None)
        if found is None:
            raise TinkerError(f"the archive of {tinker_path} holds no {WEIGHTS}")
        if found.parent != tmp:
            for item in found.parent.iterdir():
                item.rename(tmp / item.name)
        complete_config(tmp, base_model, rank)
        (tmp / SOURCE).write_text(json.dumps({"tinker_path": tinker_path, "base_model": base_model}, indent=2) + "\n")

    return write_dir_atomic(dest, fill)
