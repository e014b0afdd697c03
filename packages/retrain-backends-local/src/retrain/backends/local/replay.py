"""Rollout routing replay (R3, `[inference] routing_replay`) in the trainer's forward.

A mixture-of-experts sampler and the trainer each route every token to k experts per layer;
in bf16, or once the weights moved by an update, they pick different experts for some tokens,
and a token's ratio then measures that routing noise instead of the policy. The sampler records
its choices (`Completion.routes`, into `Datum.routes`); here every router of the trained model
(and of a frozen reference copy) is wrapped for one micro-batch's forward and backward
(backward too: checkpointed layers run their forward again) so that each position goes to the
recorded experts:

1. the router runs as it is on the tokens, so its scores carry the gradient to its weights;
2. its choice is replaced by the recorded ids, and their weights are what the family's router
   computes from those scores for those ids (`Family.routed_weights`: softmax, top-k
   renormalisation, per-expert scales), so gradients flow through the router's weights of the
   chosen experts, as R3 prescribes;
3. a position without a record (a datum's last token, which the sampler never fed back; rows
   that carry none) keeps the router's own choice.

Prompt positions are replayed too: the sampler's prefill routed them, and the completion's
tokens were drawn on top of that routing. Rows run padded ([B, L] flattened row-major) or
packed (a stream of T tokens, each computed by the row `Packed.own` names: its record is that
row's, and packing shares a position between rows only where their records agree).

Per step, `routing/replayed_routes` counts the (position, routed layer) pairs replayed and
`routing/differing_fraction` the share of them whose recorded experts differ, as a set, from
those the trainer's router would have chosen: the routing noise replay removes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from retrain.backends.local.batch import Batch
from retrain.backends.local.reference import Reference
from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.models import routing
from retrain.models.family import Family
from retrain.models.routing import RouterOutput
from retrain.types import Datum


def refusal(family: Family, model: Any, name: str) -> None:
    """UserError unless `model` has routed layers whose weights its family states."""
    k = routing.moe_shape(model.config)[2]
    kind = getattr(model.config, "model_type", "?")
    if not k:
        raise UserError(f"[inference] routing_replay = true, but {name} ({kind}) has no mixture-of-experts layer: "
                        "there is no routing to replay", hint="routing_replay = false")
    if not family.replays_routing:
        raise UserError(f"[inference] routing_replay = true is not built yet for {kind} models: retrain does not "
                        "state how their routers weigh experts", hint="routing_replay = false")


def flat_routes(mb: Batch) -> torch.Tensor | None:
    """[tokens, layers, k] int64 in the order the micro-batch's forward hands its routers the
    tokens (padded: row-major over [B, L]; packed: the stream); None without records."""
    if mb.routes is None:
        return None
    if mb.packed is not None:
        width = int(mb.packed.row_index.shape[1])
        grid = mb.routes[:, :width].reshape(-1, *mb.routes.shape[2:])
        return grid[mb.packed.own.cpu()].long()
    return mb.routes.reshape(-1, *mb.routes.shape[2:]).long()


class RoutingReplay:
    def __init__(self, family: Family, models: list[nn.Module], device: torch.device) -> None:
        """`models`: the modules whose routers replay (the policy, a frozen reference copy)."""
        self.family, self.models, self.device = family, models, device
        self.current: torch.Tensor | None = None
        # layer -> (differing, replayed) of the micro-batch's first forward, tensors (counted without a sync)
        self.pending: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.totals: list[torch.Tensor] = []

    @classmethod
    def of(cls, config: TrainConfig, family: Family, model: nn.Module, reference: Reference | None,
           device: torch.device) -> RoutingReplay | None:
        """The replay `[inference] routing_replay` asks for (UserError where `model` cannot
        replay), None when off."""
        if not config.inference.routing_replay:
            return None
        refusal(family, model, config.model.model)
        frozen = reference.frozen if reference is not None else None
        return cls(family, [model] + ([frozen] if frozen is not None else []), device)

    def check(self, datums: Sequence[Datum]) -> None:
        """RuntimeError naming the first datum with sampled tokens and no routes."""
        for i, d in enumerate(datums):
            if d.routes is None and any(d.loss_mask()):
                raise RuntimeError(f"[inference] routing_replay: datum {i} of the step has sampled tokens and no "
                                   "recorded routes (Datum.routes): its sampler recorded none")

    @contextlib.contextmanager
    def replaying(self, mb: Batch) -> Iterator[None]:
        """`mb`'s forwards (and backward) inside route as its records say."""
        routes = flat_routes(mb)
        if routes is None:
            yield
            return
        self.current, self.pending = routes.to(self.device), {}
        try:
            with contextlib.ExitStack() as stack:
                for model in self.models:
                    stack.enter_context(routing.wrapped(model, self._wrap))
                yield
        finally:
            self.totals += [torch.stack(pair) for pair in self.pending.values()]
            self.current, self.pending = None, {}

    def _wrap(self, layer: int, router: nn.Module, own: Callable[[torch.Tensor], RouterOutput]
              ) -> Callable[[torch.Tensor], RouterOutput]:
        family = self.family
        inner = getattr(router, "base_layer", router)

        def forward(hidden: torch.Tensor) -> RouterOutput:
            scores, _, chosen = own(hidden)
            assert self.current is not None
            ids = self.current[:, layer]
            if ids.shape != chosen.shape:
                raise RuntimeError(f"routing replay: the router of layer {layer} routed {tuple(chosen.shape)} "
                                   f"(tokens, k) and the record holds {tuple(ids.shape)} for this forward")
            recorded = ids[:, 0] >= 0
            ids = torch.where(recorded[:, None], ids.to(chosen.dtype), chosen)
            self._count(layer, chosen, ids, recorded)
            return scores, family.routed_weights(inner, scores, ids), ids

        return forward

    def _count(self, layer: int, chosen: torch.Tensor, ids: torch.Tensor, recorded: torch.Tensor) -> None:
        """The differing choices of `layer` in the micro-batch's first forward, the policy's
        (a checkpointed layer's second forward, or the KL reference's, is not counted again)."""
        if layer in self.pending:
            return
        with torch.no_grad():
            differ = (chosen.sort(dim=-1).values != ids.sort(dim=-1).values).any(dim=-1) & recorded
            self.pending[layer] = (differ.sum(), recorded.sum())

    def metrics(self) -> dict[str, float | int | str]:
        """Since the previous call (one step)."""
        differing, replayed = (int(v) for v in torch.stack(self.totals).sum(0).tolist()) if self.totals else (0, 0)
        self.totals = []
        return {"routing/replayed_routes": replayed,
                "routing/differing_fraction": round(differing / replayed, 6) if replayed else 0.0}
