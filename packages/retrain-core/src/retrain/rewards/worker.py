"""`python -m retrain.rewards.worker TARGET KWARGS_JSON`: a reward worker process.

Protocol (JSON lines): one `{"ready": true}` (or `{"fail": message}`) once the reward is
built, then for each `{"i", "response", "reference"}` on stdin one `{"i", "ok", "value"}`
or `{"i", "ok": false, "kind", "error", "traceback"}` on stdout. The reward's own prints go to stderr so they
cannot corrupt the protocol; math-verify's SIGALRM timeouts work here (main thread).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any


def main(argv: list[str]) -> int:
    # a stop reaches the whole process group (Ctrl-C at a terminal) or every process of a job
    # (Slurm, systemd): the trainer finishes its step (retrain.training.interrupt), so its
    # workers must live to score it; they end when the trainer closes their stdin
    for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, signal.SIG_IGN)
    protocol = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # prints inside the reward land on stderr

    def send(message: dict[str, Any]) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    from retrain.registry.core import load_target
    from retrain.rewards.bounded import fault_of
    from retrain.rewards.custom import as_float

    try:
        reward = load_target(argv[0], "")(**json.loads(argv[1] if len(argv) > 1 else "{}"))
    except BaseException as exc:
        send({"fail": f"{type(exc).__name__}: {exc}"})
        return 1
    send({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        try:
            value = as_float(reward.score(request["response"], request["reference"]))
            send({"i": request["i"], "ok": True, "value": value})
        except BaseException as exc:
            fault = fault_of(exc)
            send({"i": request["i"], "ok": False, "kind": fault.kind, "error": fault.message,
                  "traceback": fault.traceback})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
