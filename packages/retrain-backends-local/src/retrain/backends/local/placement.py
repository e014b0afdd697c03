"""The process a local backend runs in, set up before its model loads: deterministic kernels,
the torchrun world (and what a multi-process run refuses), the device, torch's CPU threads,
and the seed every rank shares.

Order is the contract: determinism is chosen before anything starts CUDA, and the global
torch seed is set last, after the ranks have agreed on rank 0's seed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from retrain.backends.local import determinism
from retrain.backends.local.options import LocalOptions
from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.inference_engine.pytorch.device import plan_device, rank_device
from retrain.process.cpus import cpu_threads
from retrain.process.world import World, current_world
from retrain.validation.runtime import several_processes


@dataclass(frozen=True)
class Placement:
    world: World
    device: torch.device
    cpu_threads: int  # torch's CPU threads; 0 on an accelerator (left as torch set them)
    seed: int  # `[training] seed`, or a random one (rank 0's under torchrun)
    mesh: Any = None  # the DeviceMesh of a multi-process run


def place(config: TrainConfig, options: LocalOptions) -> Placement:
    if options.strict_deterministic:
        determinism.prepare()
    else:
        determinism.refuse_after_strict()
    world = current_world()
    if world.distributed:
        refuse_distributed(config, options, world.size)
    device = rank_device(config.backend.devices, world) if world.distributed else plan_device(config.backend.devices)
    threads = 0
    if device.type == "cpu":
        threads, _ = cpu_threads(options.cpu_threads, processes=int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
        torch.set_num_threads(threads)
    t = config.training
    seed = t.seed if t.seed >= 0 else int.from_bytes(os.urandom(4), "little")
    mesh = None
    if world.distributed:
        from retrain.backends.local import distributed

        mesh = distributed.init_mesh(world, device)
        seed = distributed.gather(seed, world)[0]  # rank 0's seed (random when unset)
    if options.strict_deterministic:
        determinism.establish()
    torch.manual_seed(seed)
    return Placement(world, device, threads, seed, mesh)


def refuse_distributed(config: TrainConfig, options: LocalOptions, size: int) -> None:
    """What a multi-process run does not build yet, refused before the model loads: the
    settings config validation refuses for several devices (in its words), and the local
    options that have no multi-process path."""
    for issue in several_processes(config, size, torchrun=True):
        raise UserError(f"{issue.key}: {issue.message}", hint=issue.hint)
    for key in ("train_microbatch_token_budget", "train_sft_microbatch_token_budget"):
        if getattr(options, key) > 0:
            raise UserError(f"{key} with several processes is not built yet in this version",
                            hint="use train_microbatch_size")
    if options.train_padding_free == "true":
        raise UserError("train_padding_free = true with several processes is not built yet in this version "
                        "(each rank trains padded rows)", hint='train_padding_free = "auto"')
