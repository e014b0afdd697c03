"""Measuring kernels one fresh process at a time (shared by the kernels benchmarks).

A benchmark script re-invokes itself with `--worker ...` for every timed run; the worker
builds its inputs, runs warm-up steps, times one step and prints one JSON line. Rounds
interleave the variants, so a change in background load hits all of them alike.

Extra peak memory of a step: on CUDA `max_memory_allocated` above the allocation before the
step; on the CPU the peak RSS (VmHWM, reset through /proc/self/clear_refs just before the
step) above the RSS before it. tracemalloc and ru_maxrss cannot do this for torch: torch
allocates outside Python's allocator, and ru_maxrss never resets.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure(step: Callable[[], None], *, cuda: bool, warmup: int) -> dict[str, object]:
    """Run `step` warmup + 1 times; time and extra peak memory of the last run."""
    import torch

    for _ in range(warmup + 1):
        if cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        else:
            base = _status_kib("VmRSS") * 1024
            Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM := VmRSS
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() if cuda else _status_kib("VmHWM") * 1024
    return {"status": "ok", "time_s": elapsed, "extra_peak_bytes": peak - base}


def run_worker(script: str, args: Sequence[str]) -> dict[str, object]:
    """`python script --worker ...args` in a fresh process; its last stdout line as JSON."""
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        return {"status": "failed", "stderr": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def interleaved(rounds: int, keys: Sequence[tuple[str, ...]],
                run: Callable[[tuple[str, ...]], dict[str, object]],
                ) -> dict[tuple[str, ...], dict[str, object]]:
    """`run(key)` for every key, `rounds` times, round-robin; a key stops after a failure."""
    runs: dict[tuple[str, ...], list[dict[str, object]]] = {k: [] for k in keys}
    for _ in range(rounds):
        for key in keys:
            if not runs[key] or runs[key][-1].get("status") == "ok":
                runs[key].append(run(key))
    return {key: summarise(r) for key, r in runs.items()}


def summarise(runs: list[dict[str, object]]) -> dict[str, object]:
    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        return dict(runs[-1])
    times = [float(r["time_s"]) for r in ok]  # type: ignore[arg-type]
    peak = max(int(r["extra_peak_bytes"]) for r in ok)  # type: ignore[call-overload]
    return {"status": "ok", "time_s_median": statistics.median(times), "time_s": times,
            "extra_peak_bytes": peak, "extra_peak_gib": round(peak / 2**30, 4)}


def ratios(results: dict[tuple[str, ...], dict[str, object]], baseline: str,
           ) -> dict[str, dict[str, float]]:
    """time and memory of every variant over `baseline`'s, for keys (variant, *rest)."""
    out: dict[str, dict[str, float]] = {}
    for (variant, *rest), r in results.items():
        base = results.get((baseline, *rest))
        if variant == baseline or not base or r.get("status") != "ok" or base.get("status") != "ok":
            continue
        time, memory = (float(r[k]) / float(base[k])  # type: ignore[arg-type]
                        for k in ("time_s_median", "extra_peak_bytes"))
        out["/".join([variant, *rest])] = {"time_ratio": time, "memory_ratio": memory}
    return out


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for name in ("torch", "triton", "liger-kernel", "peft"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def environment(cuda: bool) -> dict[str, object]:
    import os

    import torch

    return {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "cpu_threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
        "memory_metric": "cuda max_memory_allocated above the allocation before the step"
        if cuda else "peak RSS (VmHWM) above the RSS before the step",
        "versions": versions(),
    }
