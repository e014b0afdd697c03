"""The local backend's memory and LoRA options on the tiny model: LoRA-FA trains B alone, peft's own
LoRA forward (lora_fast_linear = false) makes the fused linear's update, SFT
micro-batches by a padded-token budget and still makes the whole batch's update, gradient
checkpointing (reentrant or not, the last layers left out) gives the plain backward's
gradients, and on CUDA the saved activations wait in CPU memory."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from retrain.backends.local.backend import LocalBackend
from retrain.backends.local.batch import collate, token_budget_micro_batches
from retrain.backends.local.memory import Offload, configure_checkpointing
from retrain.types import Datum


def sft_datums(backend: LocalBackend, n: int = 6) -> list[Datum]:
    """Rows of growing length; the completion's tokens carry weight 1."""
    out = []
    for i in range(n):
        prompt = backend.tokenizer.encode_prompt(f"{i}+{i + 1}=")
        target = backend.tokenizer.encode(str(10 ** (i % 4) + i))
        out.append(Datum(tokens=prompt + target, logprobs=[0.0] * (len(prompt) + len(target)),
                         advantages=[0.0] * len(prompt) + [1.0] * len(target)))
    return out


def plain_sgd(backend: LocalBackend) -> LocalBackend:
    backend.optimizer = torch.optim.SGD([p for p in backend.model.parameters() if p.requires_grad], lr=1e-2)
    return backend


def test_lora_freeze_a_trains_b_alone(tiny_config) -> None:  # type: ignore[no-untyped-def]
    plain = LocalBackend(tiny_config())
    fa = LocalBackend(tiny_config("--backend-opt", "lora_freeze_a=true"))
    a_before = {n: p.detach().clone() for n, p in fa.model.named_parameters() if ".lora_A." in n}
    b_before = {n: p.detach().clone() for n, p in fa.model.named_parameters() if ".lora_B." in n}
    assert a_before and fa.trainable_parameters < plain.trainable_parameters  # A no longer trains
    assert fa.trainable_parameters == sum(p.numel() for p in b_before.values())
    fa.sft_step(sft_datums(fa), 1e-2, 0.0)
    fa.sft_step(sft_datums(fa), 1e-2, 0.0)  # B moves off zero, so A's gradient would be non-zero now
    params = dict(fa.model.named_parameters())
    assert all(torch.equal(params[n], t) for n, t in a_before.items())
    assert any(not torch.equal(params[n], t) for n, t in b_before.items())
    assert fa.runtime_metrics()["local_frozen_lora_a"] == len(a_before)


def test_lora_fast_linear_false_runs_peft_forward_to_the_same_update(tiny_config) -> None:  # type: ignore[no-untyped-def]
    fast = plain_sgd(LocalBackend(tiny_config()))
    peft = plain_sgd(LocalBackend(tiny_config("--backend-opt", "lora_fast_linear=false",
                                              "--backend-opt", "lora_detach_input=true")))
    detached = plain_sgd(LocalBackend(tiny_config("--backend-opt", "lora_detach_input=true")))
    assert fast.runtime_metrics()["local_fused_lora_layers"] > 0
    assert peft.runtime_metrics()["local_fused_lora_layers"] == 0
    assert peft.runtime_metrics()["local_detached_lora_layers"] > 0  # peft's forward detaches through hooks
    from retrain.kernels import kernel_metrics, reset_kernel_metrics

    paths = []
    for backend in (detached, peft):
        reset_kernel_metrics()
        for _ in range(2):  # the second step sees B off zero, so the LoRA input gradient matters
            backend.sft_step(sft_datums(backend), 1e-2, 0.0)
        paths.append(kernel_metrics()["kernels/lora_path"])
    assert paths[0] != "none" and paths[1] == "none"  # the fused linear ran in one only
    after = [dict(b.model.named_parameters()) for b in (detached, peft)]
    lora = [n for n in after[0] if "lora_" in n]
    assert lora and all(torch.allclose(after[0][n], after[1][n], atol=1e-6, rtol=1e-5) for n in lora)


def test_token_budget_slices_consecutive_rows_under_the_budget(tiny_config) -> None:  # type: ignore[no-untyped-def]
    backend = LocalBackend(tiny_config())
    batch = collate(sft_datums(backend), backend.tokenizer.pad_token_id, backend.device)
    lengths = batch.attention_mask.sum(-1).tolist()
    for budget, max_rows in ((1, 0), (2 * max(lengths), 0), (10_000, 0), (10_000, 4)):
        parts = token_budget_micro_batches(batch, budget, max_rows)
        assert sum(p.rows for p in parts) == batch.rows
        assert torch.equal(torch.cat([p.input_ids[:, :1] for p in parts]), batch.input_ids[:, :1])  # order kept
        for p in parts:
            assert p.rows == 1 or p.rows * p.input_ids.shape[1] <= budget
            assert max_rows == 0 or p.rows <= max_rows
    assert len(token_budget_micro_batches(batch, 1)) == batch.rows
    assert len(token_budget_micro_batches(batch, 10_000)) == 1


def test_sft_token_budget_makes_the_whole_batch_update(tiny_config) -> None:  # type: ignore[no-untyped-def]
    whole = plain_sgd(LocalBackend(tiny_config()))
    budget = plain_sgd(LocalBackend(tiny_config("--backend-opt", "train_sft_microbatch_token_budget=24")))
    datums = sft_datums(whole)
    a = whole.sft_step(datums, 1e-2, 0.0)
    b = budget.sft_step(datums, 1e-2, 0.0)
    assert a.metrics["sft/micro_batches"] == 1 and b.metrics["sft/micro_batches"] > 1
    assert a.loss == pytest.approx(b.loss, rel=1e-5) and a.tokens == b.tokens
    for (name, pa), (_, pb) in zip(whole.model.named_parameters(), budget.model.named_parameters(), strict=True):
        if pa.requires_grad:
            assert torch.allclose(pa, pb, atol=1e-6), name


@pytest.mark.parametrize("reentrant", ["auto", "true", "false"])
def test_checkpointing_gives_the_plain_backwards_gradients(tiny_config, reentrant: str) -> None:  # type: ignore[no-untyped-def]
    backend = LocalBackend(tiny_config())
    batch = collate(sft_datums(backend), backend.tokenizer.pad_token_id, backend.device)
    for p in backend.model.parameters():  # B = 0 would give A no gradient to compare
        if p.requires_grad:
            torch.nn.init.normal_(p.data, std=0.05)
    checkpointed = copy.deepcopy(backend.model)

    def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
        model.train()
        model.zero_grad()
        logits = model(input_ids=batch.input_ids).logits.float()
        logits.log_softmax(-1)[:, :-1].gather(-1, batch.input_ids[:, 1:, None]).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain = grads(backend.model)
    counts = configure_checkpointing(checkpointed, True, reentrant, 1)
    assert counts["local_checkpointable_layers"] == 4 and counts["local_checkpoint_skipped_layers"] == 1
    assert counts["local_checkpointed_layers"] == 3
    got = grads(checkpointed)
    assert got.keys() == plain.keys() and any(".lora_A." in n for n in got)
    for name, g in plain.items():
        assert torch.allclose(got[name], g, atol=1e-6), name


def test_offload_is_off_on_the_cpu() -> None:
    off = Offload(True, pin_memory=False, min_numel=1)
    with off.context(torch.device("cpu")):
        x = torch.randn(8, 8, requires_grad=True)
        (x * x).sum().backward()
    assert off.take() == {"local_saved_tensors_offloaded": 0, "local_saved_bytes_offloaded": 0}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="offloading moves CUDA tensors")
@pytest.mark.parametrize("min_numel", [0, 1000])
def test_offloaded_activations_give_the_same_gradients_on_cuda(min_numel: int) -> None:
    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).cuda()
    x = torch.randn(32, 64, device="cuda")
    layer(x).square().sum().backward()
    want = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    off = Offload(True, pin_memory=True, min_numel=min_numel)
    with off.context(torch.device("cuda")):
        y = layer(x).square().sum()
    y.backward()
    assert all(torch.equal(p.grad, w) for p, w in zip(layer.parameters(), want, strict=True))
    taken = off.take()
    if min_numel:
        assert taken["local_saved_tensors_offloaded"] > 0 and taken["local_saved_bytes_offloaded"] >= 4 * min_numel


def test_lora_detach_input_marks_every_adapted_layer(tiny_config) -> None:  # type: ignore[no-untyped-def]
    """The numerics (fused and peft paths agree; x gets the base gradient alone) are the kernel
    package's tests; here the option reaches every LoRA layer and training runs."""
    backend = LocalBackend(tiny_config("--backend-opt", "lora_detach_input=true"))
    metrics = backend.runtime_metrics()
    assert metrics["local_detached_lora_layers"] == metrics["local_fused_lora_layers"] > 0
    out = backend.sft_step(sft_datums(backend), 1e-2, 0.0)
    assert out.tokens > 0 and math.isfinite(out.loss)
