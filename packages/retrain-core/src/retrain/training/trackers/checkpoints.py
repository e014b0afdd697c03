"""`[logging] checkpoint_artifacts`: which trackers get each saved checkpoint, and what a
checkpoint that was not stored does to the run.

- `auto`: every tracker that stores artifacts (of the built-ins, W&B) gets it; one that could
  not store it is a warning and the run goes on.
- `wandb`: W&B gets it, fail-closed: a checkpoint W&B did not store stops the run (exit status
  3, like the reward error budget's stop); the checkpoint itself is saved under adapter_path
  and the run resumes from it.
- `off`: none does.

Every checkpoint the trainer saves (`save_every`, an interrupt, the reward error budget's stop)
is offered; the final adapter is not a checkpoint and is not (reference behaviour: with
`save_every = 0` nothing is uploaded, and validation warns).
"""

from __future__ import annotations

from collections.abc import Callable

from retrain.errors import RunStopped
from retrain.training.trackers.fanout import Trackers
from retrain.training.trackers.sink import ArtifactFolder, Receipt


class CheckpointNotStored(RunStopped):
    """`checkpoint_artifacts = "wandb"` and W&B did not store a checkpoint: the run stops after
    saving it."""


def store_checkpoint(trackers: Trackers, policy: str, artifact: ArtifactFolder, warn: Callable[[str], None], *,
                     resume: str = "") -> list[Receipt]:
    """Offer `artifact` as `policy` says; `resume` is the hint a fail-closed stop gives."""
    if policy == "off":
        return []
    receipts = (trackers.only("wandb") if policy == "wandb" else trackers).log_artifact(artifact)
    failed = [r for r in receipts if not r.stored]
    if policy == "wandb" and (failed or not receipts):
        why = "; ".join(r.reason for r in failed) or "no W&B run is live"
        raise CheckpointNotStored(
            f"[logging] checkpoint_artifacts = \"wandb\": checkpoint {artifact.name} was not stored in W&B ({why}); "
            f"the run stops here (fail-closed). The checkpoint is saved at {artifact.path}", hint=resume)
    for r in failed:
        warn(f"checkpoint {artifact.name} was not stored in {r.tracker} ({r.reason}); it is saved at {artifact.path}")
    return receipts
