"""`retrain serve [CONFIG] [--host 127.0.0.1] [--port 8000]`: the config's model behind an
OpenAI-compatible server (retrain.serve), sampled by retrain's PyTorch engine."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

from retrain.commands.config_args import resolve_config_args
from retrain.errors import UserError

API_KEY_ENV = "RETRAIN_SERVE_API_KEY"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _engine(config: Any) -> Any:
    """The serving engine of the config's backend, reached through the backend catalog like
    training is (the CLI never imports a backend distribution by name)."""
    from retrain.backends import catalog
    from retrain.backends.create import require_runnable
    from retrain.registry.core import load_target

    require_runnable(config)
    name = config.backend.backend
    entry = catalog.lookup(name)
    if entry is None or not entry.definition.serving:
        raise UserError(f"backend {name!r} offers no serving engine for retrain serve",
                        hint='[backend] backend = "local"')
    return load_target(entry.definition.serving, name)(config)


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    return sock


def run(args: list[str], host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
        adapter_root: str | None = None, adapters: list[str] | None = None, log_level: str = "warning") -> None:
    from retrain.validation.load import load_config

    if not 0 <= port <= 65535:
        raise UserError(f"--port {port} is not a TCP port")
    path, overrides = resolve_config_args(args)
    config = load_config(path, overrides).config
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV, "")
    root = Path(adapter_root or config.backend.adapter_path).resolve()
    preload: list[tuple[str, str]] = []
    for item in adapters or []:
        name, sep, where = item.partition("=")
        if not sep or not name or not where:
            raise UserError(f"--adapter {item!r}: expected NAME=PATH")
        preload.append((name, where))
    sock = _listen(host, port)
    engine = _engine(config)
    import uvicorn

    from retrain.serve.app import create_app

    try:
        for name, where in preload:
            folder = Path(where).resolve()
            if not folder.is_relative_to(root):
                raise UserError(f"--adapter {name}={where}: outside the adapter root {root}",
                                hint="pass --adapter-root DIR")
            try:
                engine.load_adapter(name, str(folder)).result()
            except ValueError as exc:
                raise UserError(f"--adapter {name}={where}: {exc}") from None
        app = create_app(engine, api_key=key, adapter_root=root)
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        if host not in LOOPBACK:
            print(f"warning: listening on {host}: anyone who reaches it can sample the model"
                  + ("" if key else " (no --api-key)"), file=sys.stderr)
        print(f"retrain serve: {config.model.model} on http://{shown}:{bound_port}/v1 (adapter root {root}"
              f"{', API key required' if key else ''}); Ctrl-C stops", flush=True)
        server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="off"))
        server.run(sockets=[sock])
    finally:
        engine.close()
        sock.close()
