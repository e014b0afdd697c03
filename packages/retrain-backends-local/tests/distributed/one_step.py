"""One train_step of the local backend on a fixed global batch, in one process or under
torchrun; rank 0 saves the full trainable weights after the step (and, with --checkpoint,
the backend's checkpoint). Run by test_local_distributed.py."""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from retrain.backends.local import distributed
from retrain.backends.local.backend import LocalBackend
from retrain.types import Datum
from retrain.validation.load import load_config


def datums(vocab: int) -> list[Datum]:
    """Five rows of different lengths (an odd count: the ranks' shares differ), fixed values."""
    g = torch.Generator().manual_seed(7)
    out = []
    for i, (prompt, completion) in enumerate([(4, 5), (3, 7), (6, 2), (2, 6), (5, 4)]):
        n = prompt + completion
        tokens = torch.randint(3, vocab, (n,), generator=g).tolist()
        logprobs = [0.0] * prompt + (-torch.rand(completion, generator=g) * 3).tolist()
        adv = [0.0] * prompt + [float((-1) ** i) * (0.5 + 0.1 * i)] * completion
        mask = [0.0] * prompt + [1.0] * completion
        out.append(Datum(tokens=tokens, logprobs=logprobs, advantages=adv, mask=mask))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--microbatch", type=int, default=0)
    ap.add_argument("--checkpoint", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    flags = ["--model", "tiny", "--devices", "cpu", "--seed", "0", "--lora-rank", "4",
             "--backend-opt", f"train_microbatch_size={args.microbatch}"]
    if args.full:
        flags += ["--backend-opt", "train_full_model=true"]
    backend = LocalBackend(load_config(None, flags, import_plugins=False).config)
    vocab = int(backend.model.config.vocab_size) if hasattr(backend.model, "config") else 64
    out = backend.train_step(datums(vocab), lr=1e-3, weight_decay=0.0)
    if backend.world.distributed:
        state = distributed.full_state(backend.model, backend.world, trainable_only=True)
    else:
        state = {n: p.detach().clone() for n, p in backend.model.named_parameters() if p.requires_grad}
    if args.checkpoint:
        backend.save_checkpoint(args.checkpoint)
    if backend.world.leader:
        torch.save({"state": state, "loss": out.loss, "tokens": out.tokens}, args.out)
    backend.close()


if __name__ == "__main__":
    main()
