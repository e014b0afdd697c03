"""How many CPUs this process may use, and how many threads torch's CPU kernels get.

`os.cpu_count()` counts the machine; a container or `taskset` grants fewer. The usable count is
the CPUs in this process's affinity mask, capped by a cgroup v2 CPU quota (`cpu.max`, rounded
down, at least 1). Threads beyond it only contend; a quota of 2 CPUs on a 64-core host is the
common case where torch's default (the host's cores) oversubscribes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def usable_cpus(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            count = min(count, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return max(1, count)


def cpu_threads(option: int, environ: Mapping[str, str] | None = None, *, processes: int = 1) -> tuple[int, str]:
    """(threads, where the number came from): the `cpu_threads` option when > 0, else a
    positive OMP_NUM_THREADS, else the usable CPUs shared by `processes` processes of this
    machine."""
    env = os.environ if environ is None else environ
    if option > 0:
        return option, "option"
    raw = env.get("OMP_NUM_THREADS", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw), "OMP_NUM_THREADS"
    return max(1, usable_cpus() // max(1, processes)), "usable CPUs"
