"""The optimizer-batch artifact without a model: what a capture writes, and every way a
replay refuses it (tampered, missing or extra files, wrong pins, a changed config)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from retrain.io.digest import file_sha256
from retrain.training.optimizer_batch.artifact import (
    ArtifactError,
    Capture,
    config_difference,
    open_artifact,
    weights_digest,
)
from retrain.types import Datum
from retrain.validation.load import load_config


class FakeBackend:
    def save_checkpoint(self, path: str) -> str:
        Path(path).mkdir(parents=True)
        (Path(path) / "optimizer.pt").write_bytes(b"optimizer state")
        return path

    def save_adapter(self, path: str) -> str:
        Path(path).mkdir(parents=True)
        (Path(path) / "adapter_model.safetensors").write_bytes(b"weights")
        (Path(path) / "adapter_config.json").write_text("{}")
        return path


def config(*flags: str):  # type: ignore[no-untyped-def]
    return load_config(None, ["--model", "tiny", "--devices", "cpu", *flags], import_plugins=False).config


DATUMS = [Datum(tokens=[1, 2, 3], logprobs=[0.0, -0.5, -0.25], advantages=[0.0, 1.5, 1.5], mask=[0, 1, 1])]


@pytest.fixture
def captured(tmp_path: Path) -> dict[str, str]:
    capture = Capture(tmp_path, FakeBackend())
    return capture.finish(config(), DATUMS, 0.01, 0.0, 0.125)


def test_capture_writes_a_complete_artifact(tmp_path: Path, captured: dict[str, str]) -> None:
    manifest = json.loads(Path(captured["manifest"]).read_text())
    assert sorted(manifest["files"]) == ["batch.json", "initial/optimizer.pt", "updated/adapter_config.json",
                                         "updated/adapter_model.safetensors"]
    assert manifest["loss"] == 0.125 and manifest["datums"] == 1 and manifest["config"]["model"] == "tiny"
    assert captured["manifest_sha256"] == file_sha256(Path(captured["manifest"]))
    assert manifest["updated_sha256"] == weights_digest(tmp_path / "optimizer_batch_step_000000" / "updated")
    assert not list(tmp_path.glob(".optimizer_batch_step_000000.tmp-*"))
    art = open_artifact(captured["manifest"], manifest_sha256=captured["manifest_sha256"],
                        logical_sha256=captured["logical_sha256"])
    assert art.batch.datums == DATUMS and art.batch.lr == 0.01
    assert msgspec.json.decode((art.folder / "batch.json").read_bytes())["weight_decay"] == 0.0
    with pytest.raises(ArtifactError, match="already exists"):
        Capture(tmp_path, FakeBackend())


def open_with(captured: dict[str, str], **pins: str):  # type: ignore[no-untyped-def]
    return open_artifact(captured["manifest"], manifest_sha256=pins.get("manifest", captured["manifest_sha256"]),
                         logical_sha256=pins.get("logical", captured["logical_sha256"]))


def test_wrong_pins_are_refused_naming_the_file(captured: dict[str, str]) -> None:
    with pytest.raises(ArtifactError, match=r"manifest\.json: sha256 .* does not match expected_manifest_sha256"):
        open_with(captured, manifest="0" * 64)
    with pytest.raises(ArtifactError, match=r"batch\.json: logical sha256 .* does not match expected_logical"):
        open_with(captured, logical="0" * 64)


@pytest.mark.parametrize(("change", "message"), [
    (lambda f: (f / "initial" / "optimizer.pt").write_bytes(b"other"), r"initial/optimizer\.pt: sha256 does not match"),
    (lambda f: (f / "updated" / "adapter_model.safetensors").unlink(), r"adapter_model\.safetensors: missing"),
    (lambda f: (f / "initial" / "extra.bin").write_bytes(b"x"), r"initial/extra\.bin: not in the manifest"),
])
def test_a_changed_artifact_is_refused_naming_the_file(tmp_path: Path, captured: dict[str, str], change,
                                                       message) -> None:  # type: ignore[no-untyped-def]
    change(tmp_path / "optimizer_batch_step_000000")
    with pytest.raises(ArtifactError, match=message):
        open_with(captured)


def test_config_differences(captured: dict[str, str]) -> None:
    saved = json.loads(Path(captured["manifest"]).read_text())["config"]
    assert config_difference(saved, config("--log-dir", "elsewhere", "--adapter-path", "x"), []) == ""
    assert config_difference(saved, config("--lr", "0.5"), []).startswith("[training] lr: ")
    options = config("--backend-opt", "gradient_checkpointing=false")
    assert config_difference(saved, options, []).startswith("[backend.options] gradient_checkpointing: ")
    assert config_difference(saved, options, ["backend.options.gradient_checkpointing"]) == ""
