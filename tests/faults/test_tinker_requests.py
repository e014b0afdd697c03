"""The Tinker backend's own HTTP requests (retrain.backends.tinker: the health probe before the
SDK's session, the download of a sampler checkpoint's archive) are bounded like every client's:
a service on 127.0.0.1 that drips its health reply fails the probe within its deadline; the
archive download follows the service's redirect to the bytes without the API key when the bytes
live on another host, refuses an archive past the cap, and unpacks a good one."""

from __future__ import annotations

import io
import json
import struct
import tarfile
import time
from pathlib import Path

import pytest
from faulty_http import FaultyServer

from retrain.backends.errors import BackendUnavailable
from retrain.backends.tinker import adapter
from retrain.backends.tinker.runtime import Secret, Service, TinkerError, base_url, served_models

KEY = "tml-secret-key-for-tests"


def archive() -> bytes:
    """A sampler archive as the service serves it: weights (a safetensors header naming LoRA
    modules) and a config that leaves target_modules unset."""
    header = json.dumps({"base_model.model.layers.0.self_attn.q_proj.lora_A.weight":
                         {"dtype": "F32", "shape": [1, 1], "data_offsets": [0, 4]}}).encode()
    files = {adapter.WEIGHTS: struct.pack("<Q", len(header)) + header + b"\0\0\0\0",
             adapter.CONFIG: json.dumps({"r": 4}).encode()}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"sampler/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_a_dripping_health_probe_fails_within_its_deadline() -> None:
    with FaultyServer("drip", body=b'{"status": "ok"}' * 4, drip_s=0.2) as server:
        base_url(Service(server.url, Secret(KEY)))  # the SDK's import, before the clock starts
        t0 = time.monotonic()
        with pytest.raises(BackendUnavailable, match="within 1 s"):
            served_models(None, Service(server.url, Secret(KEY)), timeout_s=1.0)
    assert time.monotonic() - t0 < 10.0


def test_the_archive_follows_the_redirect_without_the_key(tmp_path: Path) -> None:
    with FaultyServer("ok", body=archive()) as store, \
            FaultyServer("redirect", location=store.url + "/bucket/archive.tar") as service:
        folder = adapter.download(Service(service.url, Secret(KEY)), "tinker://run-1/sampler_weights/final",
                                  tmp_path / "final", base_model="tiny", rank=4, timeout_s=30.0)
        (asked,) = service.requests
        (fetched,) = store.requests
    assert asked[1] == "/api/v1/training_runs/run-1/checkpoints/final/archive" and asked[2]["X-API-Key"] == KEY
    assert fetched[1] == "/bucket/archive.tar" and "X-API-Key" not in fetched[2]
    config = json.loads((folder / adapter.CONFIG).read_text())
    assert config["target_modules"] == ["q_proj"] and (folder / adapter.WEIGHTS).is_file()


def test_an_archive_past_the_cap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adapter, "MAX_ARCHIVE_BYTES", 1 << 20)
    with FaultyServer("endless") as service, pytest.raises(TinkerError, match="larger than 1 MiB"):
        adapter.download(Service(service.url, Secret(KEY)), "tinker://run-1/final", tmp_path / "final",
                         base_model="tiny", rank=4, timeout_s=30.0)
    assert not (tmp_path / "final").exists()
