"""The local backend across the processes of a torchrun world: FSDP2 (`fully_shard`) over the
decoder layers and then the whole model, on NCCL (CUDA) or gloo (CPU).

Every rank runs the same sequence of collectives or the world hangs, so the contracts are:
- sampling: each rank samples a contiguous share of the step's prompts (a prompt's whole
  group on one rank) from the gathered (unsharded) weights, whose forward passes are then
  free of collectives, and every rank receives every rank's completions in prompt order;
- training: every rank collates the whole step's datums (so the loss weights of
  `loss_aggregation` are the whole step's), takes a contiguous share of the rows, and runs
  the same number of forward/backward passes (a rank short of rows runs a zero-weight one);
  FSDP averages the gradients over ranks, so each rank's loss is scaled by the world size;
- state: full weights and optimizer state are gathered to rank 0, which alone writes them
  in the single-process layout (a multi-process checkpoint loads in a single process and the
  other way round); each rank's RNG streams are saved beside rank 0's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from retrain.backends.local.batch import Batch
from retrain.backends.local.checkpointing import (
    checkpoint_meta,
    read_weights,
    save_weights,
    weights_folder,
    write_checkpoint,
)
from retrain.backends.local.logprobs import action_logprobs
from retrain.io.atomic import write_dir_atomic
from retrain.process.world import World

LAYER_LISTS = ("layers", "h", "blocks")  # names of the decoder-layer ModuleList in HF models


def init_mesh(world: World, device: torch.device) -> DeviceMesh:
    if not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
            dist.init_process_group("nccl", device_id=device)
        else:
            dist.init_process_group("gloo")
    return init_device_mesh(device.type, (world.size,))


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The longest ModuleList named like a decoder stack (`model.layers`, `transformer.h`)."""
    found = [m for name, m in model.named_modules()
             if isinstance(m, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in LAYER_LISTS]
    if not found:
        raise RuntimeError(f"{type(model).__name__} has no decoder-layer list ({', '.join(LAYER_LISTS)}) to shard")
    return list(max(found, key=lambda layers: len(layers)))


class LogprobRoot(torch.nn.Module):
    """The FSDP root: training computes logprobs from the backbone and the head separately
    (`local.logprobs`), never through the model's own forward, so the root whose forward
    gathers the embeddings, final norm and head (and reduces their gradients) is this one."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, action: torch.Tensor,
                temperature: float, chunk: int, **scoring: Any) -> torch.Tensor:
        return action_logprobs(self.model, input_ids, attention_mask, action, temperature, chunk, **scoring)


def shard(model: torch.nn.Module, mesh: DeviceMesh, param_dtype: torch.dtype | None) -> tuple[LogprobRoot, int]:
    """Shard each decoder layer, then the rest (embeddings, norm, head) under the root; the
    root and the number of layers sharded. Gradients are reduced in fp32 whatever the compute
    dtype. Parameter names of `model` are unchanged (its parameters become DTensors)."""
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32 if param_dtype else None)
    layers = decoder_layers(model)
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    root = LogprobRoot(model)
    fully_shard(root, mesh=mesh, mp_policy=policy)
    # FSDP makes the first module whose forward runs the root; sampling runs the layers
    # without this root's forward (a resumed run samples before it trains), so fix it now
    root._get_fsdp_state()._lazy_init()
    return root, len(layers)


@contextlib.contextmanager
def gathered(model: torch.nn.Module) -> Iterator[None]:
    """Full weights on every rank for the duration: forward passes inside run no collective,
    so ranks may run different numbers of them (sampling different prompts). `model` is the
    root (`shard`'s)."""
    modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for m in modules:
        m.set_reshard_after_forward(False)
        m.unshard()
    try:
        yield
    finally:
        for m in modules:
            m.set_reshard_after_forward(True)
            m.reshard()


def share(n: int, world: World) -> range:
    """Rank's contiguous share of n items; shares differ in size by at most one."""
    return range(n * world.rank // world.size, n * (world.rank + 1) // world.size)


def gather(obj: Any, world: World) -> list[Any]:
    out: list[Any] = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def broadcast(obj: Any, world: World) -> Any:
    """Rank 0's `obj` on every rank."""
    box = [obj if world.leader else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def sum_floats(values: Sequence[float], device: torch.device) -> list[float]:
    t = torch.tensor(list(values), dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return [float(v) for v in t.tolist()]


def rank_micro_batches(batch: Batch, size: int, world: World) -> list[tuple[Batch, bool]]:
    """This rank's rows in the same number of micro-batches on every rank; (micro-batch,
    real). A missing micro-batch is the step's first row with zero loss and ECHO weights: its
    backward reduces a zero gradient in step with the other ranks."""
    rows = share(batch.rows, world)
    per_rank = -(-batch.rows // world.size)
    step = per_rank if size <= 0 else min(size, per_rank)
    count = -(-per_rank // step)
    out: list[tuple[Batch, bool]] = []
    for i in range(count):
        lo, hi = rows.start + i * step, min(rows.start + (i + 1) * step, rows.stop)
        if lo < hi:
            out.append((batch.slice(lo, hi), True))
        else:
            dummy = batch.slice(0, 1)
            echo = None if dummy.echo is None else torch.zeros_like(dummy.echo)
            out.append((replace(dummy, weight=torch.zeros_like(dummy.weight), echo=echo), False))
    return out


# -- state ---------------------------------------------------------------------------------
def _full(p: torch.Tensor) -> torch.Tensor:
    return p.full_tensor() if isinstance(p, DTensor) else p


def full_state(model: torch.nn.Module, world: World, *, trainable_only: bool) -> dict[str, torch.Tensor]:
    """The full weights on rank 0 (CPU), {} elsewhere; every rank must call it. Buffers are
    not sharded and are taken as they are."""
    out: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        if trainable_only and not p.requires_grad:
            continue
        full = _full(p.detach())
        if world.leader:
            out[name] = full.cpu().clone()
    if world.leader and not trainable_only:
        out.update({name: b.detach().cpu().clone() for name, b in model.named_buffers()})
    return out


def load_full_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> list[str]:
    """Copy full tensors (held by every rank) into the sharded parameters; the names of the
    model's parameters that `state` lacks. Each rank keeps its own shard: no communication."""
    missing: list[str] = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            full = state.get(name)
            if full is None:
                missing.append(name)
                continue
            if isinstance(p, DTensor):
                local = distribute_tensor(full.to(p.dtype), p.device_mesh, p.placements, src_data_rank=None)
                p.to_local().copy_(local.to_local())
            else:
                p.copy_(full)
    return missing


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                         world: World) -> dict[str, Any]:
    """The optimizer's state_dict as a single process would write it (parameters by index in
    the param groups), full tensors on rank 0, {} elsewhere; every rank must call it."""
    sd = optimizer.state_dict()
    state: dict[int, dict[str, Any]] = {}
    for index in sorted(sd["state"]):
        entry = {}
        for key, value in sorted(sd["state"][index].items()):
            full = _full(value) if isinstance(value, torch.Tensor) else value
            entry[key] = full.cpu().clone() if isinstance(full, torch.Tensor) else full
        state[index] = entry
    return {"state": state, "param_groups": sd["param_groups"]} if world.leader else {}


def load_optimizer_state(optimizer: torch.optim.Optimizer, sd: dict[str, Any]) -> None:
    """Load a single-process optimizer state_dict into an optimizer over sharded parameters:
    each state tensor shaped like its parameter is cut to this rank's shard."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    state: dict[int, dict[str, Any]] = {}
    for index, entry in sd["state"].items():
        p = params[int(index)]
        out = {}
        for key, value in entry.items():
            if isinstance(p, DTensor) and isinstance(value, torch.Tensor) and value.shape == p.shape:
                value = distribute_tensor(value.to(p.device), p.device_mesh, p.placements, src_data_rank=None)
            out[key] = value
        state[int(index)] = out
    optimizer.load_state_dict({"state": state, "param_groups": sd["param_groups"]})


def save_checkpoint(path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, world: World, *,
                    lora: bool, rng: dict[str, Any], meta: dict[str, Any],
                    extra: Callable[[Path], None] | None = None) -> None:
    """Gather full weights, optimizer state and every rank's RNG streams (`rng`: this rank's);
    rank 0 writes the single-process layout (plus `rng.pt` "ranks", and what its `extra`
    adds) and the others wait for it."""
    weights = full_state(model, world, trainable_only=lora)
    optimizer_state = full_optimizer_state(model, optimizer, world)
    ranks = gather(rng, world)
    if world.leader:
        write_checkpoint(path, model=model, lora=lora, optimizer=optimizer,
                         rng={**ranks[0], "ranks": ranks}, meta={**meta, "world_size": world.size},
                         weights=weights, optimizer_state=optimizer_state, extra=extra)
    gather(None, world)  # no rank reads the checkpoint before it is complete


def read_checkpoint(path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, world: World, *,
                    lora: bool) -> dict[str, Any]:
    """Every rank reads the checkpoint (a filesystem all ranks see) and keeps its shards; its
    RNG streams are returned: its own when the checkpoint was written by a world of this size."""
    folder = Path(path)
    checkpoint_meta(folder, lora=lora)
    load_weights(model, weights_folder(folder, lora=lora), lora=lora)
    load_optimizer_state(optimizer, torch.load(folder / "optimizer.pt", weights_only=True))
    rng = torch.load(folder / "rng.pt", weights_only=False)
    ranks = rng.get("ranks") or []
    return ranks[world.rank] if len(ranks) == world.size else rng


def load_weights(model: torch.nn.Module, folder: Path, *, lora: bool) -> None:
    """A weights folder into the sharded model (every rank reads it)."""
    state = read_weights(folder, lora=lora)
    if lora:  # peft saves adapter keys without the adapter's name
        names = {n.replace(".default.", "."): n for n, p in model.named_parameters() if p.requires_grad}
        state = {names.get(k, k): v for k, v in state.items()}
    missing = load_full_state(model, state)
    expected = [n for n in missing if (not lora or "lora_" in n) and not n.endswith("lm_head.weight")]
    if expected:
        raise RuntimeError(f"checkpoint {folder} does not match the model (missing {sorted(expected)[:3]})")


def save_adapter(path: str, model: torch.nn.Module, world: World, *, lora: bool,
                 weights: dict[str, torch.Tensor] | None = None) -> None:
    """The full trained weights (or `weights`, full on rank 0: a published version), gathered
    and written by rank 0; the others wait for it."""
    if weights is None:
        weights = full_state(model, world, trainable_only=lora)
    if world.leader:
        write_dir_atomic(path, lambda tmp: save_weights(model, tmp, lora=lora, state_dict=weights))
    gather(None, world)
