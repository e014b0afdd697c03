"""Rollout routing replay (`[inference] routing_replay`) on the tiny MoE families: each family's
router weighs any experts as it weighs its own choice; the sampler records what its routers
chose for every prompt and completion position; the trainer's forward then routes every
recorded token and layer to exactly those experts (padded, packed, in micro-batches) with
gradients reaching the router's weights of the chosen experts; against a bf16 sampler the
sampler/trainer gap falls; a checkpoint's versions sampled ahead record the same routes after a
resume; a model without routing to replay is refused by name."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from tiny_families import COMMON, hub_model, tokenizer, write_checkpoint

from retrain.backends.local import micro
from retrain.backends.local.backend import LocalBackend
from retrain.backends.local.batch import collate
from retrain.backends.local.logprobs import action_logprobs
from retrain.backends.local.packing import pack
from retrain.backends.local.replay import RoutingReplay
from retrain.errors import UserError
from retrain.inference_engine.pytorch.sample import SampleStats, generate
from retrain.models import routing
from retrain.models.families import family_of
from retrain.types import Datum, Routes, SamplingParams

MOE = ["qwen3_moe", "qwen3_5 moe", "gemma4 moe", "gpt_oss", "mixtral", "qwen2_moe", "olmoe", "deepseek_v3", "glm4_moe",
       "qwen3_next"]
PROMPTS = [[1, 20, 30, 40, 50, 60, 70], [1, 33, 44], [1, 5, 9, 12]]
#: a Qwen3-MoE whose routing decides much of each layer (routers and experts drawn at std 0.5),
#: so a bf16 sampler routes some tokens differently from the fp32 trainer
ROUTED = dict(COMMON, head_dim=8, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
              mlp_only_layers=[], norm_topk_prob=True)


def routed_checkpoint(folder: Path, seed: int = 0) -> Path:
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("qwen3_moe", **ROUTED))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight") or ".experts." in name:
                p.normal_(0.0, 0.5)
    model.save_pretrained(str(folder))
    tokenizer().save_pretrained(str(folder))
    return folder


@contextlib.contextmanager
def experts_ids(model: torch.nn.Module) -> Iterator[dict[int, list[torch.Tensor]]]:
    """The expert ids each layer's experts module was called with, per call."""
    seen: dict[int, list[torch.Tensor]] = {}
    patched = []
    for name, module in model.named_modules():
        if type(module).__name__.endswith("Experts") and (layer := re.findall(r"layers\.(\d+)\.", name)):
            own = module.forward

            def forward(hidden: Any, ids: Any, weights: Any, _own: Any = own, _layer: int = int(layer[-1])) -> Any:
                seen.setdefault(_layer, []).append(ids.detach().clone())
                return _own(hidden, ids, weights)

            module.forward = forward
            patched.append(module)
    try:
        yield seen
    finally:
        for module in patched:
            del module.forward


def keeping(chosen: dict[int, torch.Tensor]) -> Any:
    """A router wrapper that keeps each layer's choice in `chosen`."""
    def wrap(layer: int, router: Any, own: Any) -> Any:
        def forward(hidden: torch.Tensor) -> Any:
            out = own(hidden)
            chosen[layer] = out[2]
            return out
        return forward
    return wrap


def datums_of(prompts: list[list[int]], groups: list[list[Any]]) -> list[Datum]:
    return [Datum(tokens=p + c.token_ids, logprobs=[0.0] * len(p) + c.logprobs,
                  advantages=[0.0] * len(p) + [0.5] * len(c.token_ids), mask=[0] * len(p) + [1] * len(c.token_ids),
                  routes=c.routes) for p, group in zip(prompts, groups, strict=True) for c in group]


@pytest.mark.parametrize("name", [*MOE, "qwen3_moe renormalised"])
def test_each_family_weighs_its_routers_own_choice_bit_for_bit(name: str) -> None:
    model = hub_model(name.split(" renormalised")[0])
    if name.endswith("renormalised"):
        for r in routing.routers(model).values():
            r.norm_topk_prob = True  # type: ignore[assignment]
    family = family_of(model.config)
    found = routing.routers(model)
    routed = [i for i, layer in enumerate(family.plan(model.config).layers) if layer.mlp != "dense"]
    assert family.replays_routing and sorted(found) == routed and routed
    for dtype in (torch.float32, torch.bfloat16):
        for router in found.values():
            router.to(dtype)
            for p in router.parameters():
                torch.nn.init.normal_(p, std=0.5)
            scores, weights, ids = router(torch.randn(9, 32, dtype=dtype, generator=torch.Generator().manual_seed(1)))
            assert torch.equal(family.routed_weights(router, scores, ids), weights)


@pytest.mark.parametrize("name", MOE)
@pytest.mark.parametrize("decoder", ["retrain", "transformers", "no cache"])
def test_the_sampler_records_what_its_routers_chose_at_every_position(name: str, decoder: str) -> None:
    model = hub_model(name)
    stats = SampleStats()
    groups = generate(model, PROMPTS, 2, SamplingParams(max_tokens=10), [2], 0, torch.Generator().manual_seed(3),
                      decoder="transformers" if decoder == "no cache" else decoder, use_cache=decoder != "no cache",
                      stats=stats, record_routes=True)
    assert stats.decoder == ("retrain" if decoder == "retrain" else "transformers")
    for prompt, group in zip(PROMPTS, groups, strict=True):
        for c in group:
            assert c.routes is not None and c.routes.dtype == "uint8"
            assert c.routes.shape == (len(prompt) + len(c.token_ids) - 1, 2, 2)  # vLLM's (tokens - 1, layers, k)
            chosen: dict[int, torch.Tensor] = {}
            with routing.wrapped(model, keeping(chosen)), torch.no_grad():
                model(input_ids=torch.tensor([prompt + c.token_ids]))
            recorded = torch.from_numpy(c.routes.array().astype("int64"))
            for layer, ids in chosen.items():
                assert torch.equal(ids[: recorded.shape[0]], recorded[:, layer]), (layer, c.token_ids)


@pytest.mark.parametrize("layout", ["padded", "packed", "micro-batched"])
def test_the_trainer_routes_every_recorded_token_and_layer_as_the_bf16_sampler_did(layout: str, tiny_config,
                                                                                  tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = routed_checkpoint(tmp_path / "moe")
    backend = LocalBackend(tiny_config("--model", str(folder), "--routing-replay", "true", "--temperature", "1.0"))
    assert backend.sampler is not None and backend.replay is not None
    backend.sampler.model.to(torch.bfloat16)
    datums = datums_of(PROMPTS, backend.sample(PROMPTS, 4, SamplingParams(max_tokens=12)))
    batch = collate(datums, 0, backend.device)
    parts = micro.micro_batches(batch, micro.Layout(budget=40 if layout == "micro-batched" else 0,
                                                    packed=layout != "padded"))
    assert (len(parts) > 1) == (layout == "micro-batched")
    replayed = 0
    for mb in parts:
        with experts_ids(backend.model) as seen, backend.replay.replaying(mb), backend._packed(mb), torch.no_grad():
            action_logprobs(backend.model, mb.input_ids, mb.attention_mask, mb.action, packed=mb.packed)
        for layer, [ids] in seen.items():
            tokens: set[int] = set()  # the forward's tokens with a record (packed rows share some)
            for r, row in enumerate(mb.row_indices().tolist()):
                routes = datums[row].routes
                assert routes is not None
                recorded = torch.from_numpy(routes.array()[:, layer].astype("int64"))
                if mb.packed is not None:
                    at = mb.packed.row_index[r, : recorded.shape[0]]  # the stream token at each position of the row
                else:
                    at = r * mb.input_ids.shape[1] + torch.arange(recorded.shape[0])
                assert torch.equal(ids[at], recorded), (layout, layer, row)
                tokens.update(at.tolist())
            replayed += len(tokens)
    metrics = backend.replay.metrics()
    assert metrics["routing/replayed_routes"] == replayed and 0 < float(metrics["routing/differing_fraction"]) < 0.5


def test_replay_narrows_the_gap_to_a_bf16_sampler(tiny_config, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = routed_checkpoint(tmp_path / "moe")
    gaps = {}
    for replay in (False, True):
        backend = LocalBackend(tiny_config("--model", str(folder), "--routing-replay", str(replay).lower(),
                                           "--temperature", "1.0", "--top-p", "1.0"))
        assert backend.sampler is not None
        backend.sampler.model.to(torch.bfloat16)
        datums = datums_of(PROMPTS, backend.sample(PROMPTS, 8, SamplingParams(max_tokens=16)))
        assert backend.train_step(datums, 1e-2, 0.0).tokens > 0  # one update, then a fresh batch
        datums = datums_of(PROMPTS, backend.sample(PROMPTS, 8, SamplingParams(max_tokens=16)))
        out = backend.train_step(datums, 1e-2, 0.0)
        gaps[replay] = (out.metrics["engine/logprob_gap_mean"], out.metrics["engine/logprob_gap_max"])
        metrics = backend.runtime_metrics()
        assert ("routing/differing_fraction" in metrics) == replay
    assert gaps[True][0] < gaps[False][0] and gaps[True][1] < gaps[False][1], gaps


def test_gradients_reach_the_routers_weights_of_the_replayed_experts_only() -> None:
    """Qwen3-MoE renormalised over the k chosen: an expert's weight depends on the chosen
    experts' logits alone, so its router's weight rows get gradient for the experts replayed
    somewhere, even those its own router would not have chosen, and none (but rounding) for
    the others."""
    model = hub_model("qwen3_moe").float()
    for router in routing.routers(model).values():
        router.norm_topk_prob = True  # type: ignore[assignment]
    model.requires_grad_(False)
    found = routing.routers(model)
    for router in found.values():
        router.weight.requires_grad_(True)
    tokens = torch.tensor([[1, 20, 30, 40, 50, 60]])
    wanted = torch.tensor([[0, 1], [1, 0], [0, 1], [1, 0], [0, 1], [0, 1]])  # experts 0 and 1 only
    routes = torch.stack([wanted, wanted], dim=1)[None]  # [1, 6, layers, k]
    batch = collate([Datum(tokens=tokens[0].tolist(), logprobs=[0.0] * 6, advantages=[1.0] * 6,
                           routes=Routes.of(routes[0].numpy()))], 0, torch.device("cpu"))
    replay = RoutingReplay(family_of(model.config), [model], torch.device("cpu"))
    with replay.replaying(batch), experts_ids(model) as seen:
        model(input_ids=tokens).logits.sum().backward()
    assert all(torch.equal(calls[0], wanted) for calls in seen.values())
    for router in found.values():
        grad = router.weight.grad
        assert grad is not None and bool((grad[:2].abs().sum(dim=1) > 0).all())
        assert float(grad[2:].abs().max()) < 1e-6 * float(grad[:2].abs().max())  # zero but for rounding
    assert float(replay.metrics()["routing/differing_fraction"]) > 0  # its own router chose others


def test_packing_shares_a_position_only_where_the_rows_routes_agree() -> None:
    rows = [[1, 2, 3, 4], [1, 2, 3, 5]]
    routes = torch.zeros((2, 4, 1, 2), dtype=torch.int16).numpy()
    assert pack(rows, routes=routes).tokens == 5  # 1 2 3 shared
    routes[1, 1] = 7  # the second row routed token 2 elsewhere
    layout = pack(rows, routes=routes)
    assert layout.tokens == 7 and layout.row_index[1, 1] != layout.row_index[0, 1]


def test_routes_of_a_batch_sampled_ahead_are_the_same_after_a_resume(tiny_config, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = write_checkpoint("qwen3_moe", tmp_path / "moe")
    flags = ("--model", str(folder), "--routing-replay", "true", "--max-async-level", "2")
    backend = LocalBackend(tiny_config(*flags))
    params = SamplingParams(max_tokens=10, policy_version=1, batch_id=4)
    backend.publish(0, keep=2)
    backend.train_step(datums_of(PROMPTS, backend.sample(PROMPTS, 2, SamplingParams(max_tokens=10))), 1e-2, 0.0)
    backend.publish(1, keep=2)
    before = backend.sample(PROMPTS, 3, params)
    path = backend.save_checkpoint(str(tmp_path / "ckpt"))
    resumed = LocalBackend(tiny_config(*flags))
    resumed.load_checkpoint(path)
    after = resumed.sample(PROMPTS, 3, params)
    assert after == before and all(c.routes is not None for g in after for c in g)


def test_a_model_with_no_routing_to_replay_is_refused_by_name(tiny_config, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UserError, match=r"routing_replay = true, but tiny \(qwen3\) has no mixture-of-experts layer"):
        LocalBackend(tiny_config("--routing-replay", "true"))
    # Llama 4's router returns other outputs than a top-k router's: nothing of it is replayed
    folder = write_checkpoint("llama4_text", tmp_path / "llama4")
    with pytest.raises(UserError, match="routing_replay = true is not built yet for llama4_text models"):
        LocalBackend(tiny_config("--model", str(folder), "--routing-replay", "true"))


def test_a_grouped_router_recorded_by_retrains_decoder_is_replayed(tiny_config, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """DeepSeek-V3 end to end (a dense first layer, grouped sigmoid routing, latent attention):
    retrain's decoder samples it and records its routes, which its own router reproduces in the
    trainer's fp32 forward; routes moved to other experts are the ones the trainer then runs."""
    folder = write_checkpoint("deepseek_v3", tmp_path / "model")
    backend = LocalBackend(tiny_config("--model", str(folder), "--routing-replay", "true"))
    assert backend.replay is not None
    datums = datums_of(PROMPTS, backend.sample(PROMPTS, 2, SamplingParams(max_tokens=8)))
    assert backend.runtime_metrics()["engine_decoder"] == "retrain"
    for moved in (0, 3):
        shifted = [msgspec.structs.replace(d, routes=Routes.of((d.routes.array().astype("int64") + moved) % 8))
                   for d in datums if d.routes is not None]
        batch = collate(shifted, 0, backend.device)
        with experts_ids(backend.model) as seen, backend.replay.replaying(batch), torch.no_grad():
            action_logprobs(backend.model, batch.input_ids, batch.attention_mask, batch.action, 1.0)
        assert sorted(seen) == [1]
        [ids] = seen[1]
        for r, datum in enumerate(shifted):
            assert datum.routes is not None
            recorded = torch.from_numpy(datum.routes.array()[:, 1].astype("int64"))
            at = r * batch.input_ids.shape[1] + torch.arange(recorded.shape[0])
            assert torch.equal(ids[at], recorded), (moved, r)
    assert float(backend.replay.metrics()["routing/differing_fraction"]) > 0  # the moved routes
    assert backend.train_step(datums, 1e-2, 0.0).tokens > 0
    assert int(backend.replay.metrics()["routing/replayed_routes"]) > 0
