"""The local backend on the tiny model: logprobs, sampling, micro-batching, checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from retrain.backends.local.backend import LocalBackend
from retrain.backends.local.batch import collate
from retrain.backends.local.logprobs import action_logprobs
from retrain.types import Datum, SamplingParams


@pytest.fixture
def backend(tiny_config) -> LocalBackend:  # type: ignore[no-untyped-def]
    return LocalBackend(tiny_config())


def rl_datums(backend: LocalBackend, n: int = 6, seed: int = 0) -> list[Datum]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        prompt = backend.tokenizer.encode_prompt(f"{i}+{i + 1}=")
        comp = torch.randint(6, 100, (3 + i % 4,), generator=g).tolist()
        adv = [0.0] * len(prompt) + [float(x) for x in torch.randn(len(comp), generator=g)]
        old = [0.0] * len(prompt) + [-4.0 + 0.1 * j for j in range(len(comp))]
        out.append(Datum(tokens=prompt + comp, logprobs=old, advantages=adv))
    return out


def test_training_logprobs_equal_naive_log_softmax(backend: LocalBackend) -> None:
    batch = collate(rl_datums(backend), backend.tokenizer.pad_token_id, backend.device)
    for temperature in (1.0, 0.7):
        got = action_logprobs(backend.model, batch.input_ids, batch.attention_mask, batch.action, temperature)
        logits = backend.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float()
        naive = torch.log_softmax(logits[:, :-1] / temperature, -1).gather(
            -1, batch.input_ids[:, 1:, None]).squeeze(-1)[batch.action]
        assert torch.allclose(got, naive, atol=1e-5), float((got - naive).abs().max())


def test_sampling_honours_max_tokens_and_eos(backend: LocalBackend) -> None:
    prompts = [backend.tokenizer.encode_prompt("1+2="), backend.tokenizer.encode_prompt("33+4=")]
    out = backend.sample(prompts, 3, SamplingParams(max_tokens=5))
    assert [len(g) for g in out] == [3, 3]
    eos = set(backend.tokenizer.eos_token_ids)
    for group in out:
        for c in group:
            assert 1 <= len(c.token_ids) <= 5 and len(c.logprobs) == len(c.token_ids)
            ended = c.token_ids[-1] in eos
            assert (c.finish_reason == "stop") == ended
            assert not any(t in eos for t in c.token_ids[:-1])
            if not ended:
                assert len(c.token_ids) == 5
    # force an EOS: make EOS overwhelmingly likely through the head bias
    models = [backend.model.get_base_model()] + ([backend.sampler.model] if backend.sampler else [])
    for model in models:
        head = model.lm_head
        with torch.no_grad():
            head.bias = torch.nn.Parameter(torch.zeros(head.out_features))
            head.bias[backend.tokenizer.eos_token_ids[0]] = 100.0
    out = backend.sample(prompts, 2, SamplingParams(max_tokens=5))
    assert all(c.token_ids == backend.tokenizer.eos_token_ids[:1] and c.finish_reason == "stop"
               for g in out for c in g)


def test_sampled_logprobs_match_training_logprobs(backend: LocalBackend) -> None:
    prompts = [backend.tokenizer.encode_prompt(f"{i}+{i}=") for i in range(4)]
    out = backend.sample(prompts, 4, SamplingParams(max_tokens=10))
    datums = [Datum(tokens=p + c.token_ids, logprobs=[0.0] * len(p) + c.logprobs,
                    advantages=[0.0] * len(p) + [1.0] * len(c.token_ids)) for p, g in zip(prompts, out, strict=False) for c in g]
    batch = collate(datums, backend.tokenizer.pad_token_id, backend.device)
    with torch.no_grad():
        train = action_logprobs(backend.model, batch.input_ids, batch.attention_mask, batch.action, 1.0)
    gap = float((train - batch.old_logprobs[batch.action]).abs().max())
    assert gap < 1e-4, gap


def sgd(backend: LocalBackend) -> LocalBackend:
    """Adam's first step is nearly sign(grad), which amplifies rounding noise on tiny
    gradients; SGD makes the parameter change proportional to the accumulated gradient."""
    backend.optimizer = torch.optim.SGD([p for p in backend.model.parameters() if p.requires_grad], lr=1.0)
    return backend


def masked(datums: list[Datum]) -> list[Datum]:
    """The trainer's layout: a loss mask on the completion, and one row of zero advantages."""
    out = []
    for i, d in enumerate(datums):
        start = next(j for j, a in enumerate(d.advantages) if a != 0.0)
        adv = [0.0] * len(d.tokens) if i == 1 else d.advantages
        out.append(Datum(tokens=d.tokens, logprobs=d.logprobs, advantages=adv,
                         mask=[0] * start + [1] * (len(d.tokens) - start)))
    return out


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant"])
def test_microbatched_update_equals_full_batch(tiny_config, aggregation: str) -> None:  # type: ignore[no-untyped-def]
    flags = ("--loss-aggregation", aggregation, "--max-tokens", "8")
    full = sgd(LocalBackend(tiny_config(*flags)))
    micro = sgd(LocalBackend(tiny_config(*flags, "--backend-opt", "train_microbatch_size=2")))
    datums = masked(rl_datums(full))
    a = full.train_step(datums, 1e-2, 0.0)
    b = micro.train_step(datums, 1e-2, 0.0)
    assert a.loss == pytest.approx(b.loss, rel=1e-5, abs=1e-6) and a.tokens == b.tokens
    for (name, pa), (_, pb) in zip(full.model.named_parameters(), micro.model.named_parameters(), strict=False):
        if pa.requires_grad:
            assert torch.allclose(pa, pb, atol=1e-6), name


@pytest.mark.parametrize("mode", ["kl_cov", "clip_cov"])
def test_microbatching_exact_for_selection_modes(tiny_config, mode: str) -> None:  # type: ignore[no-untyped-def]
    extra = ["--policy-loss-mode", mode, "--top-p", "1.0", "--clip-cov-ratio", "0.2", "--clip-cov-min", "-100",
             "--clip-cov-max", "100", "--kl-cov-percent", "20"]
    full = sgd(LocalBackend(tiny_config(*extra)))
    micro = sgd(LocalBackend(tiny_config(*extra, "--backend-opt", "train_microbatch_size=2")))
    datums = rl_datums(full, seed=3)
    a = full.train_step(datums, 1e-2, 0.0)
    b = micro.train_step(datums, 1e-2, 0.0)
    assert a.loss == pytest.approx(b.loss, rel=1e-5, abs=1e-6)
    assert a.metrics["policy/cov_fraction"] == pytest.approx(b.metrics["policy/cov_fraction"])
    for (name, pa), (_, pb) in zip(full.model.named_parameters(), micro.model.named_parameters(), strict=False):
        if pa.requires_grad:
            assert torch.allclose(pa, pb, atol=1e-6), name


def test_checkpoint_round_trip_is_exact(tiny_config, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = LocalBackend(tiny_config())
    datums = rl_datums(a)
    a.train_step(datums, 1e-2, 0.0)
    a.save_checkpoint(str(tmp_path / "ck"))
    after_a = a.train_step(datums, 1e-2, 0.0)
    sample_a = a.sample([a.tokenizer.encode_prompt("5+5=")], 4, SamplingParams(max_tokens=6))

    b = LocalBackend(tiny_config())
    b.sample([b.tokenizer.encode_prompt("1+1=")], 3, SamplingParams(max_tokens=4))  # move its RNG streams on
    b.load_checkpoint(str(tmp_path / "ck"))
    after_b = b.train_step(datums, 1e-2, 0.0)
    sample_b = b.sample([b.tokenizer.encode_prompt("5+5=")], 4, SamplingParams(max_tokens=6))
    assert after_a.loss == after_b.loss
    assert [c.token_ids for c in sample_a[0]] == [c.token_ids for c in sample_b[0]]
    for (_, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters(), strict=False):
        assert torch.equal(pa, pb)


def test_adapter_loads_with_peft(tiny_config, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from peft import PeftModel

    from retrain.models.load import ModelSpec, load_model

    a = LocalBackend(tiny_config())
    a.train_step(rl_datums(a), 5e-2, 0.0)
    path = a.save_adapter(str(tmp_path / "final"))
    base = load_model(ModelSpec("tiny"), seed=0)
    loaded = PeftModel.from_pretrained(base, path)
    ids = torch.tensor([a.tokenizer.encode_prompt("2+2=")])
    a.model.eval()
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=ids).logits, a.model(input_ids=ids).logits, atol=1e-6)


def test_full_model_training_and_checkpoint(tiny_config, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = LocalBackend(tiny_config("--backend-opt", "train_full_model=true"))
    assert not a.lora and a.trainable_parameters > 700_000
    datums = rl_datums(a)
    a.sft_step(datums, 1e-3, 0.0)
    a.save_checkpoint(str(tmp_path / "ck"))
    b = LocalBackend(tiny_config("--backend-opt", "train_full_model=true"))
    b.load_checkpoint(str(tmp_path / "ck"))
    for (_, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters(), strict=False):
        assert torch.equal(pa, pb)
    lora = LocalBackend(tiny_config())
    with pytest.raises(RuntimeError, match="holds full model weights"):
        lora.load_checkpoint(str(tmp_path / "ck"))
    other_seed = LocalBackend(tiny_config("--backend-opt", "train_full_model=true", "--seed", "3"))
    with pytest.raises(RuntimeError, match="seed 0"):
        other_seed.load_checkpoint(str(tmp_path / "ck"))


def test_seeded_sampling_leaves_the_training_stream_and_counters(tiny_config) -> None:  # type: ignore[no-untyped-def]
    """An evaluation call (`SamplingParams.seed`) between two training calls changes neither
    what the second training call draws nor what the step's counters report."""
    prompt = [[3, 4, 5]]
    train = SamplingParams(max_tokens=6)
    a = LocalBackend(tiny_config())
    a.sample(prompt, 4, train)
    a.runtime_metrics()
    want = a.sample(prompt, 4, train)
    want_counters = a.runtime_metrics()

    b = LocalBackend(tiny_config())
    b.sample(prompt, 4, train)
    b.runtime_metrics()
    seeded = SamplingParams(max_tokens=6, seed=123)
    first = b.sample(prompt, 8, seeded)
    assert [c.token_ids for c in b.sample(prompt, 8, seeded)[0]] == [c.token_ids for c in first[0]]
    got = b.sample(prompt, 4, train)
    counters = b.runtime_metrics()
    assert [c.token_ids for c in got[0]] == [c.token_ids for c in want[0]]
    timing = {"engine_prompt_prefill_s", "engine_decode_s", "engine_generated_tokens_per_s"}
    assert {k: v for k, v in counters.items() if k not in timing} == \
        {k: v for k, v in want_counters.items() if k not in timing}
    other = b.sample(prompt, 8, SamplingParams(max_tokens=6, seed=124))
    assert [c.token_ids for c in other[0]] != [c.token_ids for c in first[0]]


def test_a_new_backend_counts_only_its_own_kernel_calls(tiny_config) -> None:  # type: ignore[no-untyped-def]
    """The kernel record is process-wide: calls left over from an earlier run in the same
    process (a campaign, a test session) must not show up in the next run's first row."""
    from retrain.kernels.accelerators import kernel_metrics, record

    for _ in range(5):
        record("lora", "peft")
    LocalBackend(tiny_config())
    assert kernel_metrics()["kernels/lora_path"] == "none"


def test_load_adapter_restores_the_trained_policy(tiny_config, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = LocalBackend(tiny_config())
    a.train_step(rl_datums(a), 5e-2, 0.0)
    a.save_adapter(str(tmp_path / "final"))
    a.save_checkpoint(str(tmp_path / "ck"))
    greedy = SamplingParams(max_tokens=6, temperature=0.0, seed=0)
    prompts = [a.tokenizer.encode_prompt(f"{i}+1=") for i in range(4)]
    want = [[c.token_ids for c in g] for g in a.sample(prompts, 1, greedy)]
    for folder in ("final", "ck"):
        b = LocalBackend(tiny_config())
        b.load_adapter(str(tmp_path / folder))
        assert [[c.token_ids for c in g] for g in b.sample(prompts, 1, greedy)] == want, folder
    full = LocalBackend(tiny_config("--backend-opt", "train_full_model=true"))
    from retrain.errors import UserError

    with pytest.raises(UserError, match="full model weights"):
        full.load_adapter(str(tmp_path / "final"))
