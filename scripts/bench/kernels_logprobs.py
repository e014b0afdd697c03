"""Benchmark: selected-token logprobs, forward + backward, per path. Prints ONE JSON object.

CPU (default without CUDA): N=4096, V=151936, H=1024 fp32; paths `naive` (full logits,
log_softmax, gather: `reference_selected_logprobs`) and `chunked` (the torch path of
`selected_logprobs`).
GPU (`--gpu`, the default with CUDA): N=16384, V=151936, H=2048 bf16; paths `triton`,
`chunked`, `naive` and `liger` (liger-kernel's fused linear cross-entropy; "not installed"
when absent).

Grad modes: `hidden` (frozen LM head: the LoRA case, retrain's default) and `hidden+weight`
(trainable head). The upstream gradient is a random vector per token, as in RL; Liger only
supports a scalar upstream gradient, so it runs reduction="sum" (the same products).
Every timed step runs in its own process (see support/isolated.py).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from support.isolated import environment, interleaved, measure, ratios, run_worker

CPU_SHAPE = {"n": 4096, "v": 151936, "h": 1024, "dtype": "float32"}
GPU_SHAPE = {"n": 16384, "v": 151936, "h": 2048, "dtype": "bfloat16"}
GRAD_MODES = ("hidden", "hidden+weight")


def _step(path: str, grad: str, shape: dict[str, str], device: str) -> Callable[[], None]:
    """Inputs on `device` and one forward + backward of `path` over them."""
    import torch

    from retrain.kernels.logprobs import reference_selected_logprobs, selected_logprobs

    n, v, hdim = int(shape["n"]), int(shape["v"]), int(shape["h"])
    dtype = getattr(torch, shape["dtype"])
    gen = torch.Generator().manual_seed(0)
    h = (torch.randn(n, hdim, generator=gen) * 0.5).to(device, dtype).requires_grad_()
    w = (torch.randn(v, hdim, generator=gen) / hdim**0.5).to(device, dtype)
    w.requires_grad_(grad == "hidden+weight")
    t = torch.randint(0, v, (n,), generator=gen).to(device)
    g = torch.randn(n, generator=gen).to(device)

    if path == "liger":
        from liger_kernel.transformers import (  # type: ignore[import-not-found]
            LigerFusedLinearCrossEntropyLoss,
        )

        liger = LigerFusedLinearCrossEntropyLoss(reduction="sum")

        def loss() -> torch.Tensor:
            return liger(w, h, t)
    elif path == "naive":
        def loss() -> torch.Tensor:
            return (reference_selected_logprobs(h, w, t) * g).sum()
    elif path in ("chunked", "triton"):
        impl = "torch" if path == "chunked" else "triton"

        def loss() -> torch.Tensor:
            return (selected_logprobs(h, w, t, path=impl) * g).sum()
    else:
        raise ValueError(f"unknown path {path!r}")

    def step() -> None:
        h.grad = None
        w.grad = None
        loss().backward()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="GPU shape and paths (auto with CUDA)")
    parser.add_argument("--cpu", action="store_true", help="CPU shape and paths even with CUDA")
    for key in ("n", "v", "h"):
        parser.add_argument(f"--{key}", type=int)
    parser.add_argument("--dtype")
    parser.add_argument("--grad", choices=GRAD_MODES, help="one grad mode (default: both)")
    parser.add_argument("--paths", help="comma list (default per device)")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per (path, grad)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (default GPU 1, CPU 0)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--device", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        shape = {"n": args.n, "v": args.v, "h": args.h, "dtype": args.dtype}
        try:
            step = _step(args.worker, args.grad, shape, args.device)
        except ImportError as exc:
            print(json.dumps({"status": "not installed", "error": str(exc)}))
            return
        print(json.dumps(measure(step, cuda=args.device == "cuda", warmup=args.warmup)))
        return

    import torch

    gpu = args.gpu or (torch.cuda.is_available() and not args.cpu)
    shape = {k: str(getattr(args, k) or v) for k, v in (GPU_SHAPE if gpu else CPU_SHAPE).items()}
    paths = args.paths.split(",") if args.paths else (
        ["triton", "chunked", "naive", "liger"] if gpu else ["naive", "chunked"])
    grads = [args.grad] if args.grad else list(GRAD_MODES)
    warmup = args.warmup if args.warmup is not None else int(gpu)
    device = "cuda" if gpu else "cpu"

    def run(key: tuple[str, ...]) -> dict[str, object]:
        path, grad = key
        return run_worker(__file__, ["--worker", path, "--grad", grad, "--device", device,
                                     "--warmup", str(warmup), "--dtype", shape["dtype"],
                                     *(f"--{k}={shape[k]}" for k in ("n", "v", "h"))])

    results = interleaved(args.rounds, [(p, g) for g in grads for p in paths], run)
    print(json.dumps({
        "benchmark": "kernels_logprobs",
        "shape": shape,
        "rounds": args.rounds,
        "warmup_steps": warmup,
        **environment(gpu),
        "results": [{"path": p, "grad": g, **r} for (p, g), r in results.items()],
        "vs_naive": ratios(results, "naive"),
    }, indent=1))


if __name__ == "__main__":
    main()
