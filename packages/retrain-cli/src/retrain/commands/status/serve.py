"""`retrain status serve [LOGDIR] [--host 127.0.0.1] [--port 9108]`: the Prometheus exporter."""

from __future__ import annotations

import sys

from retrain.commands.status.run import log_root
from retrain.errors import UserError
from retrain.status.export.server import LOOPBACK_HOSTS, make_server


def run(logdir: str = "logs", host: str = "127.0.0.1", port: int = 9108, cache_seconds: float = 2.0) -> None:
    root = log_root(logdir)
    if not 0 <= port <= 65535:
        raise UserError(f"--port {port} is not a TCP port")
    if cache_seconds < 0:
        raise UserError("--cache-seconds must be >= 0")
    try:
        server = make_server(root, host, port, cache_seconds)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    if host not in LOOPBACK_HOSTS:
        print(f"warning: listening on {host}: run names and metrics are visible to that network",
              file=sys.stderr)
    print(f"retrain exporter for {root} on {server.url} (/metrics, /v1/runs, /healthz); Ctrl-C stops",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
