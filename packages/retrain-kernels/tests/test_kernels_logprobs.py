"""The torch path of `selected_logprobs` against the naive reference (values and gradients)."""

from __future__ import annotations

import pytest
import torch

from retrain.kernels.accelerators import kernel_metrics
from retrain.kernels.logprobs import LoRAHead, reference_selected_logprobs, selected_logprobs

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _torch_path(chunk_size: int = 0, temperature: float = 1.0, lora: LoRAHead | None = None,
                floor: torch.Tensor | None = None):
    def run(head):
        return selected_logprobs(head.h, head.w, head.t, bias=head.b, lora=lora,
                                 temperature=temperature, return_entropy=True,
                                 chunk_size=chunk_size, path="torch", floor=floor)
    return run


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("train_head", [False, True], ids=["frozen-head", "trained-head"])
@pytest.mark.parametrize("entropy", [False, True], ids=["lp-grad", "lp+entropy-grad"])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_matches_reference(make_head, check_head, dtype, train_head, entropy, temperature):
    head = make_head(23, 97, 20, dtype=dtype, masked=(0, 5, 6), train_head=train_head,
                     bias=temperature != 1.0)
    check_head(head, _torch_path(chunk_size=7, temperature=temperature),
               temperature=temperature, entropy=entropy)
    assert kernel_metrics()["kernels/logprob_path"] == "torch"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("train_head", [False, True], ids=["frozen-head", "trained-head"])
@pytest.mark.parametrize("chunk_size", [0, 3, 7])
def test_a_floor_truncates_each_rows_normalisation(make_head, check_head, truncation_floors, dtype, train_head,
                                                   chunk_size):
    # chunk 3 of 29 columns leaves vocabulary chunks whose every logit is below the floor
    head = make_head(13, 29, 16, dtype=dtype, masked=(5,), train_head=train_head, bias=True)
    floor = truncation_floors(head, keep=4, temperature=0.7)
    check_head(head, _torch_path(chunk_size=chunk_size, temperature=0.7, floor=floor), temperature=0.7,
               floor=floor)


def test_a_floor_below_every_logit_changes_nothing(make_head, assert_near):
    head = make_head(9, 31, 8)
    full = selected_logprobs(head.h, head.w, head.t, bias=head.b, path="torch")
    kept = selected_logprobs(head.h, head.w, head.t, bias=head.b, path="torch", floor=torch.full((9,), -1e9))
    assert_near(kept, full, 0.0, "logprobs")


@pytest.mark.parametrize("chunk_size", [0, 1, 5, 23, 100])
def test_chunk_size_does_not_change_results(make_head, check_head, chunk_size):
    check_head(make_head(23, 61, 16, masked=(4,)), _torch_path(chunk_size=chunk_size))


def test_single_row(make_head, check_head):
    check_head(make_head(1, 50, 8), _torch_path())


def test_all_rows_masked_give_zeros_and_no_gradient(make_head):
    head = make_head(4, 30, 8, masked=(0, 1, 2, 3))
    lp, ent = _torch_path()(head)
    (lp.sum() + ent.sum()).backward()
    assert (lp == 0).all() and (ent == 0).all()
    assert (head.h.grad == 0).all() and (head.w.grad == 0).all() and (head.b.grad == 0).all()


def test_leading_dimensions_are_kept(make_head, assert_near):
    head = make_head(12, 40, 8)
    lp, ent = selected_logprobs(head.h.reshape(3, 4, 8), head.w, head.t.reshape(3, 4),
                                bias=head.b, return_entropy=True, path="torch")
    assert lp.shape == ent.shape == (3, 4)
    ref = reference_selected_logprobs(head.ref["h"], head.ref["w"], head.t, bias=head.ref["b"])
    assert_near(lp.reshape(-1), ref, 5e-5, "logprobs")


def test_large_logits_stay_finite_and_exact(make_head, check_head):
    # Logits of order 1e3: exp would overflow without the running max, and an entropy formed
    # as LSE − E[z] would lose digits to cancellation.
    head = make_head(9, 80, 16, scale=300.0, bias=False)
    check_head(head, _torch_path(chunk_size=4))


def test_low_precision_inputs_give_fp32_results(make_head):
    head = make_head(5, 33, 8, dtype=torch.bfloat16)
    lp, ent = _torch_path()(head)
    assert lp.dtype == ent.dtype == torch.float32


def test_no_grad_call_matches(make_head, assert_near):
    head = make_head(10, 50, 8)
    with torch.no_grad():
        lp = selected_logprobs(head.h, head.w, head.t, bias=head.b, path="torch")
    ref = reference_selected_logprobs(head.ref["h"], head.ref["w"], head.t, bias=head.ref["b"])
    assert lp.grad_fn is None
    assert_near(lp, ref, 5e-5, "logprobs")


@pytest.mark.parametrize("train_head", [False, True])
def test_backward_keeps_nothing_of_size_n_by_v(make_head, train_head):
    n, v = 40, 500
    head = make_head(n, v, 8, train_head=train_head)
    sizes: list[int] = []

    def pack(x: torch.Tensor) -> torch.Tensor:
        sizes.append(x.numel())
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        lp = selected_logprobs(head.h, head.w, head.t, bias=head.b, chunk_size=8, path="torch")
    lp.sum().backward()
    assert sizes and max(sizes) < n * v


def test_lora_head_matches_reference(make_head, assert_near):
    head = make_head(17, 45, 12, masked=(2,))
    gen = torch.Generator().manual_seed(3)
    a = (torch.randn(4, 12, generator=gen) * 0.3).requires_grad_()
    b = (torch.randn(45, 4, generator=gen) * 0.3).requires_grad_()
    keep = (torch.rand(17, 12, generator=gen) > 0.25).float()

    def dropout(x: torch.Tensor) -> torch.Tensor:  # a fixed mask: deterministic "dropout"
        return x * keep

    lora = LoRAHead(a, b, 1.5, dropout)
    lp, ent = selected_logprobs(head.h, head.w, head.t, bias=head.b, lora=lora,
                                temperature=0.8, return_entropy=True, chunk_size=5, path="torch")
    g = torch.randn(17, generator=gen)
    (lp * g + ent).sum().backward()
    got = [head.h.grad, head.w.grad, a.grad, b.grad]
    for x in (head.h, head.w, a, b):
        x.grad = None
    ref_lp, ref_ent = reference_selected_logprobs(head.h, head.w, head.t, bias=head.b, lora=lora,
                                                  temperature=0.8, return_entropy=True)
    (ref_lp * g + ref_ent).sum().backward()
    assert_near(lp, ref_lp, 5e-5, "logprobs")
    assert_near(ent, ref_ent, 5e-5, "entropies")
    for name, mine, ref in zip("hwab", got, [head.h.grad, head.w.grad, a.grad, b.grad],
                               strict=True):
        assert_near(mine, ref, 1e-5, f"grad {name}")


def test_rejects_bad_inputs(make_head):
    head = make_head(4, 10, 8)
    bad = head.t.clone()
    bad[0] = 10
    with pytest.raises(ValueError, match="target ids"):
        selected_logprobs(head.h, head.w, bad)
    with pytest.raises(ValueError, match="temperature"):
        selected_logprobs(head.h, head.w, head.t, temperature=0.0)
    with pytest.raises(ValueError, match="hidden size"):
        selected_logprobs(head.h[:, :4], head.w, head.t)
    with pytest.raises(ValueError, match="targets"):
        selected_logprobs(head.h, head.w, head.t[:3])
    with pytest.raises(TypeError, match="int32/int64"):
        selected_logprobs(head.h, head.w, head.t.float())


def test_empty_input(make_head):
    head = make_head(1, 10, 8)
    lp, ent = selected_logprobs(head.h[:0], head.w, head.t[:0], return_entropy=True)
    assert lp.shape == ent.shape == (0,)
