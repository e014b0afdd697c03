"""Benchmark: LoRA linear forward + backward, fused vs peft-style. Prints ONE JSON object.

Paths: `unfused` (x Wᵀ + b + s·(x Aᵀ) Bᵀ with plain autograd, what peft runs), `torch` (the
fused autograd function's torch path) and, on CUDA, `triton`. The base weight is frozen and
the adapters train, as in LoRA fine-tuning. CPU default: 4096 tokens, 2048 → 2048, rank 16,
fp32. GPU (`--gpu`, the default with CUDA): 16384 tokens, 4096 → 4096, rank 16, bf16 base with
fp32 adapters (peft's default for a bf16 model).
Every timed step runs in its own process (see support/isolated.py).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from support.isolated import environment, interleaved, measure, ratios, run_worker

CPU_SHAPE = {"m": 4096, "k": 2048, "o": 2048, "r": 16, "dtype": "float32",
             "adapter_dtype": "float32"}
GPU_SHAPE = {"m": 16384, "k": 4096, "o": 4096, "r": 16, "dtype": "bfloat16",
             "adapter_dtype": "float32"}


def _step(path: str, shape: dict[str, str], device: str) -> Callable[[], None]:
    import torch

    from retrain.kernels.lora import lora_linear, reference_lora_linear

    m, k, o, r = (int(shape[key]) for key in ("m", "k", "o", "r"))
    dtype, adapter = getattr(torch, shape["dtype"]), getattr(torch, shape["adapter_dtype"])
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(m, k, generator=gen).to(device, dtype).requires_grad_()
    w = (torch.randn(o, k, generator=gen) / k**0.5).to(device, dtype)
    b = torch.randn(o, generator=gen).to(device, dtype)
    a = (torch.randn(r, k, generator=gen) / k**0.5).to(device, adapter).requires_grad_()
    bb = (torch.randn(o, r, generator=gen) * 0.1).to(device, adapter).requires_grad_()
    g = torch.randn(m, o, generator=gen).to(device, dtype)

    if path == "unfused":
        def forward() -> torch.Tensor:
            return reference_lora_linear(x, w, a, bb, 2.0, b)
    elif path in ("torch", "triton"):
        def forward() -> torch.Tensor:
            return lora_linear(x, w, a, bb, 2.0, b, path=path)
    else:
        raise ValueError(f"unknown path {path!r}")

    def step() -> None:
        for leaf in (x, a, bb):
            leaf.grad = None
        forward().backward(g)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="GPU shape and paths (auto with CUDA)")
    parser.add_argument("--cpu", action="store_true", help="CPU shape and paths even with CUDA")
    for key in ("m", "k", "o", "r"):
        parser.add_argument(f"--{key}", type=int)
    parser.add_argument("--dtype")
    parser.add_argument("--adapter-dtype", dest="adapter_dtype")
    parser.add_argument("--paths", help="comma list (default per device)")
    parser.add_argument("--rounds", type=int, default=5, help="timed runs per path")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps before the timed one")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--device", help=argparse.SUPPRESS)
    args = parser.parse_args()
    keys = ("m", "k", "o", "r", "dtype", "adapter_dtype")
    if args.worker:
        shape = {key: str(getattr(args, key)) for key in keys}
        step = _step(args.worker, shape, args.device)
        print(json.dumps(measure(step, cuda=args.device == "cuda", warmup=args.warmup)))
        return

    import torch

    gpu = args.gpu or (torch.cuda.is_available() and not args.cpu)
    defaults = GPU_SHAPE if gpu else CPU_SHAPE
    shape = {key: str(getattr(args, key) or defaults[key]) for key in keys}
    paths = args.paths.split(",") if args.paths else (
        ["triton", "torch", "unfused"] if gpu else ["unfused", "torch"])
    device = "cuda" if gpu else "cpu"

    def run(key: tuple[str, ...]) -> dict[str, object]:
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in shape.items()]
        return run_worker(__file__, ["--worker", key[0], "--device", device,
                                     "--warmup", str(args.warmup), *flags])

    results = interleaved(args.rounds, [(p,) for p in paths], run)
    print(json.dumps({
        "benchmark": "kernels_lora",
        "shape": shape,
        "rounds": args.rounds,
        "warmup_steps": args.warmup,
        **environment(gpu),
        "results": [{"path": p, **r} for (p,), r in results.items()],
        "vs_unfused": ratios(results, "unfused"),
    }, indent=1))


if __name__ == "__main__":
    main()
