"""`devices` with several entries: rerun this very command under torchrun, one process per
entry (`python -m torch.distributed.run --standalone`). Inside torchrun (WORLD_SIZE set) the
command trains; a multi-node launch is torchrun's own (docs/scaling.md)."""

from __future__ import annotations

import os
import subprocess
import sys

from retrain.commands.errors import CommandFailed
from retrain.config.fields import parse_devices
from retrain.config.schema import TrainConfig
from retrain.process.cpus import cpu_threads


def processes(config: TrainConfig) -> int:
    """How many processes `retrain` launches for this config: 0 when it trains in place."""
    if os.environ.get("WORLD_SIZE"):
        return 0
    n = len(parse_devices(config.backend.devices))
    return n if n > 1 else 0


def launch(n: int, argv: list[str]) -> None:
    """Run `retrain argv` on n processes and return when they end; their failure is ours."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
           "-m", "retrain.cli", *argv]
    print(f"retrain: {n} devices: training on {n} processes (torchrun --standalone --nproc-per-node {n})",
          file=sys.stderr)
    # each process gets its share of the usable CPUs (torchrun's own default would be 1 thread)
    env = {**os.environ, "OMP_NUM_THREADS": str(cpu_threads(0, processes=n)[0])}
    code = subprocess.call(cmd, env=env)
    if code != 0:
        raise CommandFailed(code=code if code > 0 else 1)
