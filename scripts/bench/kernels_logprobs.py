"""Benchmark: selected-token logprobs, forward + backward, per path. Prints ONE JSON object.

CPU (default without CUDA): N=4096, V=151936, H=1024 fp32; paths `naive` (full logits,
log_softmax, gather) and `chunked` (the torch path of `selected_logprobs`). Every timed run
is its own fresh process, and rounds interleave the paths so background load hits them alike.
Extra peak memory is the run's peak RSS (VmHWM, reset through /proc/self/clear_refs just
before it) minus the RSS with the inputs allocated.

GPU (`--gpu`, the default when CUDA is present): N=16384, V=151936, H=2048 bf16; paths
`triton`, `chunked`, `naive` and `liger` (liger-kernel's fused linear cross-entropy, reported
as "not installed" when absent); memory is `torch.cuda.max_memory_allocated` above the inputs.

Grad modes: `hidden` (frozen LM head, the LoRA case) and `hidden+weight` (trainable head).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

CPU_SHAPE = {"n": 4096, "v": 151936, "h": 1024, "dtype": "float32"}
GPU_SHAPE = {"n": 16384, "v": 151936, "h": 2048, "dtype": "bfloat16"}
GRAD_MODES = ("hidden", "hidden+weight")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak_rss() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM := VmRSS


def _make_step(path: str, h: torch.Tensor, w: torch.Tensor, t: torch.Tensor,
               g: torch.Tensor) -> Callable[[], None]:
    """One forward + backward of `path`; the upstream gradient `g` is a random vector."""
    from retrain.kernels.logprobs import reference_selected_logprobs, selected_logprobs

    if path == "liger":
        from liger_kernel.transformers import (  # type: ignore[import-not-found]
            LigerFusedLinearCrossEntropyLoss,
        )

        # Liger folds the backward into its forward and supports only a scalar upstream
        # gradient, so it runs reduction="sum" (the same products as a per-row gradient).
        loss_fn = LigerFusedLinearCrossEntropyLoss(reduction="sum")
        return lambda: loss_fn(w, h, t).backward()
    if path == "naive":
        return lambda: (reference_selected_logprobs(h, w, t) * g).sum().backward()
    if path in ("chunked", "triton"):
        impl = "torch" if path == "chunked" else "triton"
        return lambda: (selected_logprobs(h, w, t, path=impl) * g).sum().backward()
    raise ValueError(f"unknown path {path!r}")


def worker(path: str, grad: str, shape: dict[str, object], warmup: int,
           device: str) -> dict[str, object]:
    """One timed forward + backward of `path` in this (fresh) process."""
    import torch

    dtype = getattr(torch, str(shape["dtype"]))
    n, v, hdim = int(shape["n"]), int(shape["v"]), int(shape["h"])  # type: ignore[call-overload]
    gen = torch.Generator(device="cpu").manual_seed(0)
    h = (torch.randn(n, hdim, generator=gen) * 0.5).to(device, dtype).requires_grad_()
    w = (torch.randn(v, hdim, generator=gen) / hdim**0.5).to(device, dtype)
    w.requires_grad_(grad == "hidden+weight")
    t = torch.randint(0, v, (n,), generator=gen).to(device)
    g = torch.randn(n, generator=gen).to(device)
    try:
        step = _make_step(path, h, w, t, g)
    except ImportError:
        return {"status": "not installed"}

    cuda = device == "cuda"
    for _ in range(warmup + 1):  # only the last run is reported
        h.grad = None
        w.grad = None
        if cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        else:
            base = _status_kib("VmRSS") * 1024
            _reset_peak_rss()
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() if cuda else _status_kib("VmHWM") * 1024
    return {"status": "ok", "time_s": elapsed, "extra_peak_bytes": peak - base, "warm": warmup > 0}


def _run_isolated(args: argparse.Namespace, path: str, grad: str) -> dict[str, object]:
    cmd = [sys.executable, __file__, "--worker", path, "--grad", grad, "--n", str(args.n),
           "--v", str(args.v), "--h", str(args.h), "--dtype", args.dtype,
           "--device", args.device, "--warmup", str(args.warmup)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"status": "failed", "stderr": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _summarise(path: str, grad: str, runs: list[dict[str, object]]) -> dict[str, object]:
    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        return {"path": path, "grad": grad, **runs[-1]}
    times = [float(r["time_s"]) for r in ok]  # type: ignore[arg-type]
    peak = max(int(r["extra_peak_bytes"]) for r in ok)  # type: ignore[call-overload]
    return {"path": path, "grad": grad, "status": "ok", "time_s_median": statistics.median(times),
            "time_s": times, "extra_peak_bytes": peak, "extra_peak_gib": round(peak / 2**30, 4)}


def _versions() -> dict[str, str]:
    import torch

    out = {"python": sys.version.split()[0], "torch": torch.__version__}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = "not installed"
    try:
        from importlib.metadata import version

        out["liger_kernel"] = version("liger-kernel")
    except Exception:
        out["liger_kernel"] = "not installed"
    return out


def _compare(results: list[dict[str, object]], path: str) -> dict[str, dict[str, float]]:
    """Per grad mode: time and extra-peak ratios of `path` against naive."""
    out: dict[str, dict[str, float]] = {}
    by = {(r["path"], r["grad"]): r for r in results if r.get("status") == "ok"}
    for grad in GRAD_MODES:
        a, b = by.get((path, grad)), by.get(("naive", grad))
        if a and b:
            out[grad] = {
                "time_ratio": float(a["time_s_median"]) / float(b["time_s_median"]),  # type: ignore[arg-type]
                "memory_ratio": float(a["extra_peak_bytes"]) / float(b["extra_peak_bytes"]),  # type: ignore[arg-type]
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="GPU shape and paths (auto with CUDA)")
    parser.add_argument("--cpu", action="store_true", help="CPU shape and paths even with CUDA")
    parser.add_argument("--n", type=int)
    parser.add_argument("--v", type=int)
    parser.add_argument("--h", type=int)
    parser.add_argument("--dtype")
    parser.add_argument("--grad", choices=GRAD_MODES)
    parser.add_argument("--paths", help="comma list; default per device")
    parser.add_argument("--rounds", type=int, default=3,
                        help="fresh processes per (path, grad), interleaved across paths")
    parser.add_argument("--warmup", type=int, help="untimed runs first (default: GPU 1, CPU 0)")
    parser.add_argument("--device", help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        shape = {"n": args.n, "v": args.v, "h": args.h, "dtype": args.dtype}
        print(json.dumps(worker(args.worker, args.grad, shape, args.warmup, args.device)))
        return

    import torch

    gpu = args.gpu or (torch.cuda.is_available() and not args.cpu)
    args.device = "cuda" if gpu else "cpu"
    shape = dict(GPU_SHAPE if gpu else CPU_SHAPE)
    for key in shape:
        if getattr(args, key) is not None:
            shape[key] = getattr(args, key)
        setattr(args, key, shape[key])
    paths = args.paths.split(",") if args.paths else (
        ["triton", "chunked", "naive", "liger"] if gpu else ["naive", "chunked"])
    grads = [args.grad] if args.grad else list(GRAD_MODES)
    env_threads = os.environ.get("OMP_NUM_THREADS")
    if args.warmup is None:
        args.warmup = 1 if gpu else 0
    # Rounds interleave the paths, so a change in background load hits all of them alike.
    runs: dict[tuple[str, str], list[dict[str, object]]] = {(p, gr): [] for gr in grads for p in paths}
    for _ in range(args.rounds):
        for gr in grads:
            for p in paths:
                if runs[(p, gr)] and runs[(p, gr)][-1].get("status") != "ok":
                    continue
                runs[(p, gr)].append(_run_isolated(args, p, gr))
    results = [_summarise(p, gr, r) for (p, gr), r in runs.items()]
    report = {
        "benchmark": "kernels_logprobs",
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "cpu_threads": torch.get_num_threads() if env_threads is None else int(env_threads),
        "shape": shape,
        "rounds": args.rounds,
        "warmup_runs": args.warmup,
        "memory_metric": "cuda max_memory_allocated above inputs" if gpu
        else "peak RSS (VmHWM) above RSS with inputs allocated",
        "versions": _versions(),
        "results": results,
        "vs_naive": {p: _compare(results, p) for p in paths if p != "naive"},
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
