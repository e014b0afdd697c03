"""Weights & Biases: selected by `[logging] wandb_project` (or `"wandb"` in `trackers`).

wandb is optional (`pip install 'retrain-core[wandb]'`) and imported when the run starts.
`WANDB_MODE=offline` needs no network: the run, checkpoint artifacts included, is written
under `<log_dir>/wandb/` for a later `wandb sync`.

Checkpoints (`[logging] checkpoint_artifacts`, retrain.training.trackers.checkpoints) become
versions of one artifact per run, type `retrain_checkpoint`, aliased with the checkpoint's
name and `latest`; after each, the run's `train/recoverability/latest_checkpoint_*` fields
say whether it was stored: `uploaded` and `step` as series, `name`, `reason` and `artifact` in
the run summary (`step` counts the steps the checkpoint covers, as its name does).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.training.trackers.select import DEFAULT_PROJECT
from retrain.training.trackers.sink import (
    TRAIN_PREFIX,
    ArtifactFolder,
    Receipt,
    RunInfo,
    import_tracker,
)

ARTIFACT_TYPE = "retrain_checkpoint"
RECOVERABILITY = TRAIN_PREFIX + "recoverability/latest_checkpoint_"


def parse_tags(text: str) -> list[str]:
    return [tag.strip() for tag in text.split(",") if tag.strip()]


def artifact_name(run_name: str) -> str:
    """The run's checkpoint artifact: W&B names allow letters, digits, `-`, `_` and `.`."""
    return "checkpoints-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", run_name).strip("-") or "run")


def _import_wandb() -> Any:
    return import_tracker("wandb", "wandb", "wandb", "[logging] selects W&B (wandb_project, or \"wandb\" in trackers)")


class WandbSink:
    """One W&B run per training run."""

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self.run: Any = None
        self.name = ""
        self.step = 0  # the highest step logged: W&B drops a point below it

    def start(self, info: RunInfo) -> None:
        wandb = _import_wandb()
        log = self.config.logging
        info.log_dir.mkdir(parents=True, exist_ok=True)
        self.name = log.wandb_run_name or info.name
        self.run = wandb.init(
            project=log.wandb_project or log.tracker_project or DEFAULT_PROJECT,
            name=self.name,
            entity=log.wandb_entity or None,
            group=log.wandb_group or None,
            tags=parse_tags(log.wandb_tags) or None,
            dir=str(info.log_dir),
            config=dict(info.config),
        )

    def log_row(self, values: Mapping[str, float | int], step: int) -> None:
        self.step = max(self.step, step)
        self.run.log(dict(values), step=step)

    def log_artifact(self, artifact: ArtifactFolder) -> Receipt:
        """Log the checkpoint folder as the next version of the run's artifact (offline: kept
        for `wandb sync`); an error is the receipt's reason, not an exception."""
        wandb = _import_wandb()
        name = artifact_name(self.name)
        try:
            stored = wandb.Artifact(name, type=ARTIFACT_TYPE, metadata=dict(artifact.metadata))
            stored.add_dir(str(artifact.path))
            self.run.log_artifact(stored, aliases=[artifact.name, "latest"])
            receipt = Receipt("wandb", True, reference=f"{name}:{artifact.name}",
                              reason="offline: `wandb sync` uploads it" if self.run.offline else "")
        except Exception as exc:  # the policy decides: a warning, or the run's end (fail-closed)
            receipt = Receipt("wandb", False, reason=f"{type(exc).__name__}: {exc}")
        self.step = max(self.step, artifact.tracker_step)
        self.run.log({RECOVERABILITY + "uploaded": int(receipt.stored), RECOVERABILITY + "step": artifact.steps},
                     step=self.step)
        self.run.summary.update({RECOVERABILITY + "name": artifact.name, RECOVERABILITY + "reason": receipt.reason,
                                 RECOVERABILITY + "artifact": receipt.reference})
        return receipt

    def finish(self, exit_code: int) -> None:
        if self.run is not None:
            self.run.finish(exit_code=exit_code)
            self.run = None
