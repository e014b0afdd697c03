"""`devices` with several entries: rerun this very command under torchrun, one process per
entry (`python -m torch.distributed.run --standalone`). Inside torchrun (WORLD_SIZE set) the
command trains; a multi-node launch is torchrun's own (docs/scaling.md).

A stop (SIGINT, SIGTERM, SIGHUP) that reaches this process is handed to torchrun, which hands
it to every rank (retrain.training.interrupt: the ranks finish the step, save and stop
together); this process then waits for them. torchrun runs in a session of its own, so a
Ctrl-C at the terminal reaches it once, through here, not twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType

from retrain.commands.errors import CommandFailed
from retrain.config.fields import parse_devices
from retrain.config.schema import TrainConfig
from retrain.process.cpus import cpu_threads
from retrain.training.interrupt import STOP_SIGNALS, stopped_exit_code

#: `python -m torch.distributed.run`, quiet about a stop it hands to the ranks: its notes on it
#: (logged at WARNING) and the traceback of the SignalException it ends with would read as a
#: crash; it exits 128 + the signal's number instead, the ranks having said what they saved
TORCHRUN = """
import logging, os, sys
os.environ["LOGLEVEL"] = "ERROR"
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.run import main
del os.environ["LOGLEVEL"]
logging.getLogger("torch.distributed.elastic").setLevel(logging.ERROR)
try:
    main(sys.argv[1:])
except SignalException as stop:
    sys.exit(128 + int(stop.sigval))
"""


def processes(config: TrainConfig) -> int:
    """How many processes `retrain` launches for this config: 0 when it trains in place."""
    if os.environ.get("WORLD_SIZE"):
        return 0
    n = len(parse_devices(config.backend.devices))
    return n if n > 1 else 0


def launch(n: int, argv: list[str]) -> None:
    """Run `retrain argv` on n processes and return when they end; their failure is ours."""
    cmd = [sys.executable, "-c", TORCHRUN, "--standalone", f"--nproc-per-node={n}", "-m", "retrain.cli", *argv]
    print(f"retrain: {n} devices: training on {n} processes (torchrun --standalone --nproc-per-node {n})",
          file=sys.stderr)
    # each process gets its share of the usable CPUs (torchrun's own default would be 1 thread)
    env = {**os.environ, "OMP_NUM_THREADS": str(cpu_threads(0, processes=n)[0])}
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    stops: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        stops.append(signum)
        proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in STOP_SIGNALS}
    try:
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if code != 0:
        # torchrun reports a stop it passed on as its own failure; the ranks saved and said so
        raise CommandFailed(code=stopped_exit_code(stops[0]) if stops else code if code > 0 else 1)
