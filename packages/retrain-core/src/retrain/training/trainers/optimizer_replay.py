"""`trainer = "optimizer_replay"`: redo one captured optimizer step and check it bit for bit.

1. verify the artifact before any model loads: the manifest's sha256 against
   `expected_manifest_sha256`, every file against the manifest, the logical batch against
   `expected_logical_sha256` (a mismatch names the file);
2. refuse a config that differs from the captured one outside `allow_config_differences`
   (naming the key);
3. load the backend, restore the captured initial state (weights, optimizer, RNG streams),
   run `train_step` on the captured datums with the captured lr and weight decay;
4. save the weights to `<adapter_path>/final` and compare: the loss must equal the captured
   loss and the weights' digest the captured one, exactly; otherwise the run fails.

`<log_dir>/optimizer_batch_replay_manifest.json` records what was compared; the trackers of
`[logging]` get it as one row at step 0 (`loss`, `captured_loss`, `loss_equal`,
`weights_equal`, `datums`, `train_time_s`), a mismatch included.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from retrain.backends.create import create_backend, require_runnable
from retrain.config.folders import adapter_folder
from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.io.atomic import write_json_atomic
from retrain.io.layout import FINAL, REPLAY_MANIFEST
from retrain.process.spans import span
from retrain.training.meta import RunStatus
from retrain.training.optimizer_batch.artifact import (
    Artifact,
    config_difference,
    open_artifact,
    weights_digest,
)
from retrain.training.result import RunResult
from retrain.training.trackers.select import tracking
from retrain.training.trackers.sink import payload


class ReplayMismatch(RuntimeError):
    """The replayed step did not reproduce the captured loss or weights."""


def replay(config: TrainConfig, *, config_path: str = "") -> tuple[str, dict[str, Any]]:
    ob = config.optimizer_batch
    artifact = open_artifact(ob.replay_path, manifest_sha256=ob.expected_manifest_sha256,
                             logical_sha256=ob.expected_logical_sha256)
    difference = config_difference(artifact.manifest["config"], config, ob.allow_config_differences)
    if difference:
        raise UserError(f"optimizer replay: {difference}")
    require_runnable(config)
    status = RunStatus(config, config_path=config_path)
    with status.recorded(), tracking(config, "optimizer_replay") as trackers:
        final, report = _replay(config, artifact, status, lambda row: trackers.log_row(payload(row), 0))
    status.succeeded(final)
    return final, report


def _replay(config: TrainConfig, artifact: Artifact, status: RunStatus,
            record: Callable[[dict[str, Any]], None]) -> tuple[str, dict[str, Any]]:
    """Steps 3 and 4, the comparison `record`ed; a mismatch is recorded as `replay_mismatch`
    and raised."""
    backend = create_backend(config)
    try:
        backend.load_checkpoint(str(artifact.initial))
        batch = artifact.batch
        with span("train") as trained:
            out = backend.train_step(batch.datums, batch.lr, batch.weight_decay)
        final = backend.save_adapter(str(adapter_folder(config) / FINAL))
    finally:
        backend.close()
    digest = weights_digest(Path(final))
    report = {"artifact": str(artifact.folder), "datums": len(batch.datums),
              "captured_loss": artifact.manifest["loss"], "replayed_loss": out.loss,
              "captured_updated_sha256": artifact.manifest["updated_sha256"], "replayed_updated_sha256": digest,
              "final_adapter": final}
    report["loss_equal"] = out.loss == artifact.manifest["loss"]
    report["weights_equal"] = digest == artifact.manifest["updated_sha256"]
    write_json_atomic(Path(config.logging.log_dir) / REPLAY_MANIFEST, report)
    record({"loss": out.loss, "captured_loss": artifact.manifest["loss"], "loss_equal": report["loss_equal"],
            "weights_equal": report["weights_equal"], "datums": len(batch.datums),
            "train_time_s": round(trained.seconds, 6)})
    if not (report["loss_equal"] and report["weights_equal"]):
        error = (f"the replayed step differs from the captured one: loss {out.loss!r} vs {artifact.manifest['loss']!r}, "
                 f"weights {'equal' if report['weights_equal'] else 'different'}")
        status.failed("replay_mismatch", error)
        raise ReplayMismatch(error)
    return final, report


def run(config: TrainConfig, reporter: object = None, *, config_path: str = "") -> RunResult:
    """`[training] trainer = "optimizer_replay"`: one optimizer step from a captured batch."""
    final, report = replay(config, config_path=config_path)
    return RunResult(config.logging.log_dir, final, 1, report)
