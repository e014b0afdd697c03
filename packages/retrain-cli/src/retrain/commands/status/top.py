"""`retrain top [LOGDIR]`: the live view, `retrain status --watch --active`."""

from __future__ import annotations

from retrain.commands.status.run import run as status


def run(logdir: str = "logs", interval: float = 5.0) -> None:
    status(logdir, active=True, watch_=True, interval=interval)
