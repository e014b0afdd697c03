"""The grace period a run needs between SIGTERM and SIGKILL (docs/reliability.md): one JSON object.

A run told to stop finishes the step in flight, saves a checkpoint (weights, optimizer, RNG
streams, the trainer state, then the digests of every file) and exits. This measures, on the
README demo (`retrain.toml`: the tiny model, full-weight training, CPU) cut to 2 warmup steps:

- `signal_to_saved_s`: SIGTERM sent at a random moment of an RL step, until the run prints
  that its checkpoint is saved (from then on a SIGKILL loses nothing), over `--trials` runs,
  each in a fresh process; `signal_to_exit_s`: until the process has exited (status 143), the
  interpreter's own teardown included;
- `checkpoint_s`: one checkpoint of the demo's backend (`save_checkpoint`, then the digests),
  in this process, the median of 5, with the checkpoint's size;
- `step_s`: the RL steps' own `step_time_s` in those runs.

    uv run python scripts/bench/stop_grace.py [--trials 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARGS = ["--sft-warmup-steps", "2", "--save-every", "100", "--log-dir", "logs", "--adapter-path", "adapters"]


def rl_rows(log_dir: Path) -> list[dict[str, object]]:
    try:
        lines = (log_dir / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    rows = []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return [r for r in rows if r.get("phase") != "sft"]


def one_stop(root: Path, rng: random.Random) -> tuple[float, float, int, list[float]]:
    """(seconds from SIGTERM until the run says its checkpoint is saved, until the process has
    exited, its exit status, the RL steps' step_time_s)."""
    shutil.copy(REPO / "retrain.toml", root / "retrain.toml")
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.Popen([sys.executable, "-m", "retrain.cli", *ARGS], cwd=root, env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    said: list[float] = []

    def watch() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "checkpoint saved:" in line:
                said.append(time.perf_counter())

    reader = threading.Thread(target=watch, daemon=True)
    reader.start()
    try:
        while len(rl_rows(root / "logs")) < 3:
            if proc.poll() is not None:
                raise RuntimeError(f"the demo ended first (status {proc.returncode})")
            time.sleep(0.02)
        steps = [float(r["step_time_s"]) for r in rl_rows(root / "logs")]  # type: ignore[arg-type]
        time.sleep(rng.uniform(0, statistics.median(steps)))  # somewhere inside the next step
        sent = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=600)
        exited = time.perf_counter()
        reader.join(timeout=10)
        return said[0] - sent, exited - sent, code, steps
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def checkpoint_cost(root: Path) -> dict[str, float]:
    """One checkpoint of the demo's backend, then its digests: medians of 5, and its size."""
    from retrain.backends.local.backend import LocalBackend
    from retrain.training.integrity import seal
    from retrain.validation.load import load_config

    config = load_config(REPO / "retrain.toml", ["--log-dir", str(root / "logs")], import_plugins=False).config
    backend = LocalBackend(config)
    saves, digests = [], []
    for i in range(5):
        t0 = time.perf_counter()
        saved = backend.save_checkpoint(str(root / f"checkpoint_{i}"))
        t1 = time.perf_counter()
        seal(saved)
        digests.append(time.perf_counter() - t1)
        saves.append(t1 - t0)
    size = sum(p.stat().st_size for p in Path(saved).rglob("*") if p.is_file())
    backend.close()
    return {"checkpoint_s": round(statistics.median(saves), 3), "digests_s": round(statistics.median(digests), 3),
            "checkpoint_mb": round(size / 1e6, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    saved, exits, codes, steps = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="retrain-stop-grace-") as tmp:
        for trial in range(args.trials):
            root = Path(tmp) / f"trial{trial}"
            root.mkdir()
            to_saved, to_exit, code, step_times = one_stop(root, rng)
            saved.append(round(to_saved, 3))
            exits.append(round(to_exit, 3))
            codes.append(code)
            steps += step_times
        cost = checkpoint_cost(Path(tmp) / "cost")
    print(json.dumps({"workload": "demo (retrain.toml), 2 warmup steps, SIGTERM inside an RL step",
                      "threads": int(os.environ.get("OMP_NUM_THREADS", "1")),
                      "signal_to_saved_s": saved, "signal_to_saved_s_max": max(saved),
                      "signal_to_exit_s": exits, "signal_to_exit_s_max": max(exits), "exit_status": codes,
                      "step_s_median": round(statistics.median(steps), 3), **cost}))


if __name__ == "__main__":
    main()
