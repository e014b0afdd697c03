"""Packed micro-batches (`train_padding_free`): the layout, the packed attention against the
padded forward on the families people RL-train, and the update of a packed step against the
padded one within 1e-6 (fp32, CPU) for RL and SFT, with and without a token budget."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from retrain.backends.local.attention import KEYWORD, packed, support, take_calls
from retrain.backends.local.backend import LocalBackend
from retrain.backends.local.packing import pack
from retrain.types import Datum

ROWS = [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 9, 9], [1, 2, 3, 4, 5, 6, 7, 8, 10, 11], [4, 4], [1, 2, 3, 9, 9, 7]]


def test_rows_sharing_a_prefix_compute_it_once() -> None:
    layout = pack(ROWS)
    # sorted: [1 2 3 4 5 6 7 8] [1 2 3 4 5 6 7 8 10 11] [1 2 3 9 9] [1 2 3 9 9 7] [4 4]
    assert layout.tokens == 8 + 2 + 2 + 1 + 2
    stream = layout.input_ids[0].tolist()
    positions = layout.position_ids[0].tolist()
    for r, row in enumerate(ROWS):
        view = layout.row_index[r, : len(row)].tolist()
        assert [stream[i] for i in view] == row  # each row reads its own tokens
        assert [positions[i] for i in view] == list(range(len(row)))  # at its own positions
    owners = layout.own.tolist()
    assert sorted(owners) == owners or len(set(owners)) == len(owners)  # each token has one owner
    width = layout.row_index.shape[1]
    for t, flat in enumerate(owners):  # the owner's view holds the token where it says
        assert layout.row_index[flat // width, flat % width] == t
    views = layout.view_index.tolist()
    for t, place in enumerate(layout.own_view.tolist()):
        assert views[place] == t


def test_without_sharing_every_row_is_whole() -> None:
    layout = pack(ROWS, share=False)
    assert layout.tokens == sum(len(r) for r in ROWS)


def tiny(model_type: str, **extra: object) -> torch.nn.Module:
    kw: dict[str, object] = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                 max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    kw.update(extra)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **kw)).eval()


# Families people RL-train, as transformers ships them: each either runs packed exactly or
# says why not (and the backend then trains it padded).
PACKED_FAMILIES = {
    "llama": {}, "mistral": {}, "qwen2": {}, "qwen3": {},
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16),
    "gemma3_text": dict(sliding_window=3, layer_types=["sliding_attention", "full_attention"]),
    "phi3": {}, "olmo2": {}, "granite": {}, "smollm3": {}, "glm4": {},
    "gpt2": dict(n_embd=32, n_layer=2, n_head=4, n_positions=64),
}
PADDED_FAMILIES = {
    "gemma2": {},  # attention logit soft-capping
    "qwen3_next": dict(layer_types=["linear_attention", "full_attention"]),  # gated delta-net layers
}


def backbone_of(model: torch.nn.Module) -> torch.nn.Module:
    return model.model if hasattr(model, "model") else model.transformer  # type: ignore[return-value]


@pytest.mark.parametrize("family", list(PACKED_FAMILIES))
def test_packed_forward_equals_the_padded_one(family: str) -> None:
    model = tiny(family, **PACKED_FAMILIES[family])
    backbone = backbone_of(model)
    assert support(model, backbone, 2) == ""
    width = max(map(len, ROWS))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in ROWS])
    with torch.no_grad():
        want = backbone(input_ids=ids, use_cache=False).last_hidden_state
        layout = pack(ROWS)
        take_calls()
        with packed(model):
            stream = backbone(input_ids=layout.input_ids, position_ids=layout.position_ids, use_cache=False,
                              **{KEYWORD: layout}).last_hidden_state[0]
    assert sum(take_calls().values()) == 2
    real = torch.tensor([[i < len(r) for i in range(width)] for r in ROWS])
    got = stream[layout.row_index.clamp(max=layout.tokens - 1)]
    assert float((got - want)[real].abs().max()) <= 1e-5


@pytest.mark.parametrize("family", list(PADDED_FAMILIES))
def test_a_family_packing_cannot_reproduce_says_why(family: str) -> None:
    model = tiny(family, **PADDED_FAMILIES[family])
    assert support(model, backbone_of(model), 2) != ""


def rl_datums(backend: LocalBackend, prompts: int = 4, group: int = 4, seed: int = 0) -> list[Datum]:
    """Groups of completions of one prompt, of uneven length, some sharing their first tokens."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(prompts):
        prompt = backend.tokenizer.encode_prompt(f"{i}+{i + 3}=")
        start = torch.randint(6, 100, (2,), generator=g).tolist()
        for j in range(group):
            tail = torch.randint(6, 100, (1 + (3 * j + i) % 6,), generator=g).tolist()
            comp = (start if j % 2 else []) + tail
            adv = float(torch.randn((), generator=g))
            out.append(Datum(tokens=prompt + comp, logprobs=[0.0] * len(prompt) + [-3.0 - 0.1 * k for k in range(len(comp))],
                             advantages=[0.0] * len(prompt) + [adv] * len(comp),
                             mask=[0] * len(prompt) + [1] * len(comp)))
    return out


def gradients(backend: LocalBackend, datums: list[Datum], sft: bool = False) -> dict[str, torch.Tensor]:
    """The update's gradient, before the optimizer's step."""
    backend.optimizer.zero_grad(set_to_none=True)
    if not sft:
        backend.policy_gradients(datums)
        return {n: p.grad.clone() for n, p in backend.model.named_parameters() if p.grad is not None}
    out: dict[str, torch.Tensor] = {}
    step = backend._step
    backend._step = lambda metrics: out.update(  # type: ignore[method-assign]
        {n: p.grad.clone() for n, p in backend.model.named_parameters() if p.grad is not None})
    backend.sft_step(datums, 0.0, 0.0)
    backend._step = step  # type: ignore[method-assign]
    return out


def worst(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and a
    return max(float((a[n] - b[n]).abs().max()) for n in a)


def pair(tiny_config, *flags: str) -> tuple[LocalBackend, LocalBackend]:  # type: ignore[no-untyped-def]
    padded = LocalBackend(tiny_config("--backend-opt", "train_padding_free=false", *flags))
    packed_ = LocalBackend(tiny_config("--backend-opt", "train_padding_free=true", *flags))
    with torch.no_grad():  # B = 0 would leave A without gradient
        for (_, p), (_, q) in zip(padded.model.named_parameters(), packed_.model.named_parameters(), strict=True):
            if p.requires_grad:
                p.normal_(0.0, 0.05)
                q.copy_(p)
    for b in (padded, packed_):  # plain SGD: the step is the gradient itself (Adam's first step
        # divides each gradient by its own size, so near-zero entries would swing it)
        b.optimizer = torch.optim.SGD([p for p in b.model.parameters() if p.requires_grad], lr=1e-2)
    return padded, packed_


CASES = {
    "token_mean": (),
    "seq_mean_token_sum, budget": ("--backend-opt", "train_microbatch_token_budget=24",
                                   "--loss-aggregation", "seq_mean_token_sum"),
    "gspo, clipped": ("--importance-sampling-level", "sequence", "--clip-eps", "0.2", "--top-p", "1.0"),
    "kl_cov, kl penalty": ("--policy-loss-mode", "kl_cov", "--kl-coef", "0.1", "--top-p", "1.0"),
    "full model, rows cap": ("--backend-opt", "train_full_model=true", "--backend-opt", "train_microbatch_size=5"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_packed_rl_update_equals_the_padded_one(tiny_config, case: str) -> None:  # type: ignore[no-untyped-def]
    padded, packed_ = pair(tiny_config, *CASES[case])
    datums = rl_datums(padded)
    a, b = gradients(padded, datums), gradients(packed_, datums)
    metrics = packed_.runtime_metrics()
    assert worst(a, b) <= 1e-6
    assert max(float(g.abs().max()) for g in a.values()) > 1e-3  # the gradients are not trivially zero
    # the step ran packed, shared its prompts and is reported so
    padded.train_step(datums, 1e-3, 0.0)
    packed_.train_step(datums, 1e-3, 0.0)
    m, p = packed_.runtime_metrics(), padded.runtime_metrics()
    assert m["train/packed"] == 1 and p["train/packed"] == 0 and m["train/padding_fraction"] == 0
    assert m["train/shared_fraction"] > 0.2 and p["train/padding_fraction"] >= 0
    assert m["train/forward_tokens"] < m["train/tokens"] == p["train/tokens"] <= p["train/forward_tokens"]
    assert m["train_tokens_per_s"] > 0 and "mfu" not in m  # no CUDA peak on the CPU
    assert "train/attention_sdpa_calls" in m and metrics.get("train/packed") is None
    params = dict(padded.model.named_parameters())
    assert max(float((q - params[n]).abs().max()) for n, q in packed_.model.named_parameters()) <= 1e-6


def test_a_packed_sft_update_equals_the_padded_one(tiny_config) -> None:  # type: ignore[no-untyped-def]
    for flags in ((), ("--backend-opt", "train_sft_microbatch_token_budget=20")):
        padded, packed_ = pair(tiny_config, *flags)
        datums = [Datum(tokens=d.tokens, logprobs=[0.0] * len(d.tokens), advantages=[float(m) for m in d.mask or []])
                  for d in rl_datums(padded, seed=1)]
        assert worst(gradients(padded, datums, sft=True), gradients(packed_, datums, sft=True)) <= 1e-6
        parts = packed_.runtime_metrics()["train/micro_batches"]
        assert (parts > 1) == bool(flags)


def test_the_budget_bounds_every_packed_micro_batch(tiny_config) -> None:  # type: ignore[no-untyped-def]
    from retrain.backends.local import micro
    from retrain.backends.local.batch import collate

    backend = LocalBackend(tiny_config())
    batch = collate(rl_datums(backend, prompts=6), backend.tokenizer.pad_token_id, backend.device)
    for budget in (12, 30, 64):
        parts = micro.micro_batches(batch, micro.Layout(budget=budget, packed=True))
        assert sorted(r for p in parts for r in p.row_indices().tolist()) == list(range(batch.rows))
        for p in parts:
            assert p.packed is not None and (p.packed.tokens <= budget or p.rows == 1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="varlen flash attention is CUDA's")
def test_on_cuda_bf16_rows_take_varlen_attention_and_match_the_padded_step(tiny_config) -> None:  # type: ignore[no-untyped-def]
    from retrain.backends.local.attention import verify_varlen

    assert verify_varlen(torch.device("cuda", 0), torch.bfloat16)  # torch's varlen kernel agrees with SDPA
    padded, packed_ = pair(tiny_config, "--devices", "gpu:0")
    datums = rl_datums(padded)
    a, b = gradients(padded, datums), gradients(packed_, datums)
    scale = max(float(g.abs().max()) for g in a.values())
    assert worst(a, b) <= 5e-2 * scale  # bf16 products in different shapes: rounding, not a leak
    assert packed_.runtime_metrics().get("train/attention_varlen_calls", 0) > 0
