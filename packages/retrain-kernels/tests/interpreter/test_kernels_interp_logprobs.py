"""The Triton logprob kernels, run by Triton's CPU interpreter, against the naive reference.

Runs only with TRITON_INTERPRET=1 set before triton is imported; `test_kernels_triton.py`
starts such a process. Shapes are tiny (the interpreter is numpy) but cross every tile edge:
the interpreter's tiles are 16 rows × 32 vocabulary columns × 16 hidden units.
"""

from __future__ import annotations

import os

import pytest
import torch

from retrain.kernels.accelerators import kernel_metrics
from retrain.kernels.logprobs import LoRAHead, reference_selected_logprobs, selected_logprobs

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="needs TRITON_INTERPRET=1 (run by test_kernels_triton.py)")


def _triton(chunk_size=0, temperature=1.0, floor=None):
    def run(head):
        return selected_logprobs(head.h, head.w, head.t, bias=head.b, temperature=temperature,
                                 return_entropy=True, chunk_size=chunk_size, path="triton", floor=floor)
    return run


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("train_head", [False, True], ids=["frozen-head", "trained-head"])
def test_matches_reference(make_head, check_head, dtype, train_head):
    # N=37: three row blocks, the last partial; V=203: seven vocabulary tiles, the last
    # partial, split over three forward slices; H=40: a partial hidden block; backward chunks
    # of 16 rows.
    head = make_head(37, 203, 40, dtype=dtype, masked=(0, 17, 36), train_head=train_head)
    check_head(head, _triton(chunk_size=16, temperature=0.7), temperature=0.7)
    metrics = kernel_metrics()
    assert metrics["kernels/logprob_path"] == "triton" and metrics["kernels/logprob_triton_calls"]


@pytest.mark.parametrize("train_head", [False, True], ids=["frozen-head", "trained-head"])
def test_a_floor_truncates_each_rows_normalisation(make_head, check_head, truncation_floors, train_head):
    # V=203 in seven tiles over three slices: some tiles hold no kept logit of a row
    head = make_head(21, 203, 24, masked=(4,), train_head=train_head)
    floor = truncation_floors(head, keep=9, temperature=0.8)
    check_head(head, _triton(chunk_size=16, temperature=0.8, floor=floor), temperature=0.8, floor=floor)


def test_single_row_many_slices(make_head, check_head):
    check_head(make_head(1, 203, 24), _triton())


def test_logprob_gradient_only_no_bias(make_head, check_head):
    check_head(make_head(20, 70, 16, bias=False), _triton(), entropy=False)


def test_large_logits(make_head, check_head):
    check_head(make_head(9, 80, 16, scale=300.0, bias=False), _triton(chunk_size=4))


def test_matches_torch_path(make_head, assert_near):
    head = make_head(21, 90, 24, masked=(3,))
    args = (head.h, head.w, head.t)
    kw = {"bias": head.b, "temperature": 1.3, "return_entropy": True}
    for a, b in zip(selected_logprobs(*args, **kw, path="triton"),
                    selected_logprobs(*args, **kw, path="torch"), strict=True):
        assert_near(a, b, 5e-5, "triton vs torch")


def test_lora_head(make_head, assert_near):
    head = make_head(19, 75, 20, masked=(2,))
    gen = torch.Generator().manual_seed(3)
    a = (torch.randn(3, 20, generator=gen) * 0.3).requires_grad_()
    b = (torch.randn(75, 3, generator=gen) * 0.3).requires_grad_()
    lora = LoRAHead(a, b, 2.0)
    g = torch.randn(19, generator=gen)
    results = []
    for path in ("triton", "reference"):
        for x in (head.h, head.w, head.b, a, b):
            x.grad = None
        if path == "triton":
            lp, ent = selected_logprobs(head.h, head.w, head.t, bias=head.b, lora=lora,
                                        return_entropy=True, chunk_size=8, path="triton")
        else:
            lp, ent = reference_selected_logprobs(head.h, head.w, head.t, bias=head.b,
                                                  lora=lora, return_entropy=True)
        (lp * g + ent).sum().backward()
        results.append([lp, ent, head.h.grad, head.w.grad, head.b.grad, a.grad, b.grad])
    names = ["logprobs", "entropies", "grad h", "grad W", "grad b", "grad A", "grad B"]
    for name, mine, ref in zip(names, *results, strict=True):
        assert_near(mine, ref, 5e-5 if name in names[:2] else 1e-5, name)
