"""The processes one run trains on, as torchrun describes them in the environment.

A run started by `torchrun --nproc-per-node N` (or by `retrain` for `devices` with N entries)
has `WORLD_SIZE=N`; every process runs the whole trainer loop in lockstep (the backend's
collectives keep them there), and only rank 0 writes the run's files. Without torchrun the
world is one process. Reading the environment imports no torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from retrain.errors import UserError


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def leader(self) -> bool:
        """The one process that writes logs, metrics, run_meta.json and checkpoints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def current_world(environ: Mapping[str, str] | None = None) -> World:
    env = os.environ if environ is None else environ
    raw = {k: env.get(k, "") for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    if not raw["WORLD_SIZE"]:
        return World()
    try:
        size = int(raw["WORLD_SIZE"])
        rank = int(raw["RANK"] or 0)
        local = int(raw["LOCAL_RANK"] or rank)
    except ValueError:
        raise UserError(f"torchrun environment is malformed: RANK={raw['RANK']!r} WORLD_SIZE={raw['WORLD_SIZE']!r} "
                        f"LOCAL_RANK={raw['LOCAL_RANK']!r}") from None
    if size < 1 or not 0 <= rank < size:
        raise UserError(f"torchrun environment is malformed: RANK={rank} is outside WORLD_SIZE={size}")
    return World(rank, size, local)
