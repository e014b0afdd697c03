"""The PyTorch sampling engine: whatever mode training left the model in, retrain's decoding
forward against transformers' (greedy tokens exactly, sampled tokens distributionally),
compaction of finished rows, and rows that never depend on their neighbours. The exactness
tests run on the llama family and on every other family retrain's decoder runs (Mistral with
a window shorter than the sequence, Qwen3-MoE, Qwen3.5, Gemma 3, Gemma 4 and their variants:
`tiny_families`)."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_families import hub_model
from transformers import AutoConfig, AutoModelForCausalLM

from retrain.inference_engine.pytorch.choice import choose
from retrain.inference_engine.pytorch.sample import RowSet, SampleStats, decode, generate
from retrain.models.tiny import ASSETS
from retrain.types import SamplingParams

SHAPES = {
    "qwen3": None,  # the built-in tiny model's config
    "llama": dict(model_type="llama", vocab_size=211, hidden_size=48, intermediate_size=96, num_hidden_layers=3,
                  num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256, rope_theta=500.0,
                  tie_word_embeddings=True, rms_norm_eps=1e-5,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "qwen2": dict(model_type="qwen2", vocab_size=157, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256, tie_word_embeddings=False),
}


#: the other families retrain's decoder runs, as `tiny_families` builds them (text models: what
#: retrain loads from a multimodal checkpoint)
FAMILIES = ["mistral short window", "qwen3_moe", "qwen3_5 text", "qwen3_5 moe", "gemma3 text", "gemma4 text",
            "gemma4 shared kv", "gemma4 moe", "gpt_oss", "mixtral", "qwen2_moe", "olmoe", "deepseek_v3", "glm4_moe",
            "qwen3_next", "llama4_text"]
EVERY = sorted(SHAPES) + FAMILIES
#: peft's "all-linear" also wraps Llama 4's router, a Linear whose forward returns a tuple, and
#: breaks transformers' own forward: its LoRA goes on the projections by name
LINEAR_SUFFIXES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def every_linear(shape: str) -> list[str] | str:
    return LINEAR_SUFFIXES if shape == "llama4_text" else "all-linear"


def model_of(shape: str, seed: int = 0) -> torch.nn.Module:
    if shape in FAMILIES:
        return hub_model(shape, seed)
    raw = dict(SHAPES[shape] or json.loads((ASSETS / "config.json").read_text()))
    model_type = raw.pop("model_type")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **raw))
    return model.eval()


PROMPTS = [[5, 9, 13], [7, 8, 9, 10, 11, 12, 13], [21]]


def sample(model: torch.nn.Module, params: SamplingParams, *, n: int = 3, decoder: str = "auto", seed: int = 0,
           eos: int = 2, prompts: list[list[int]] = PROMPTS, stats: SampleStats | None = None):  # type: ignore[no-untyped-def]
    return generate(model, prompts, n, params, [eos], 0, torch.Generator().manual_seed(seed), decoder=decoder,
                    stats=stats)


def test_sampling_runs_in_eval_mode_with_its_cache_under_gradient_checkpointing() -> None:
    """Gradient checkpointing in training mode turns transformers' cache off: sampling used to
    fail at its first step (`batch_repeat_interleave` on None). The engine samples in eval
    mode on either forward and hands the model back in training mode, checkpointing on."""
    model = model_of("qwen3")
    model.gradient_checkpointing_enable()
    model.train()
    for decoder in ("retrain", "transformers"):
        stats = SampleStats()
        out = sample(model, SamplingParams(max_tokens=6), decoder=decoder, stats=stats)
        assert stats.decoder == decoder and all(1 <= len(c.token_ids) <= 6 for g in out for c in g)
    assert model.training and all(m.training for m in model.modules())
    assert model.model.gradient_checkpointing


def test_dropout_never_touches_sampling() -> None:
    model = model_of("qwen3")
    model.config.attention_dropout = 0.5
    for m in model.modules():
        if hasattr(m, "attention_dropout"):
            m.attention_dropout = 0.5
    model.train()
    a = sample(model, SamplingParams(max_tokens=8), decoder="transformers")
    b = sample(model, SamplingParams(max_tokens=8), decoder="transformers")
    assert [c.token_ids for g in a for c in g] == [c.token_ids for g in b for c in g]
    assert model.training


@pytest.mark.parametrize("shape", EVERY)
def test_greedy_tokens_equal_transformers_generate(shape: str) -> None:
    model = model_of(shape)
    eos = model.config.vocab_size - 1
    stats = SampleStats()
    ours = sample(model, SamplingParams(max_tokens=20, temperature=0.0), n=1, eos=eos, stats=stats)
    assert stats.decoder == "retrain", stats.decoder_note
    for prompt, group in zip(PROMPTS, ours, strict=True):
        ids = torch.tensor([prompt])
        want = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=20,
                              pad_token_id=0, eos_token_id=eos)[0, len(prompt):].tolist()
        assert group[0].token_ids == want


@pytest.mark.parametrize("shape", EVERY)
@pytest.mark.parametrize("params", [SamplingParams(max_tokens=16),
                                    SamplingParams(max_tokens=16, temperature=0.7, top_p=0.9, top_k=40, min_p=0.02)],
                         ids=["plain", "truncated"])
@pytest.mark.parametrize("packed", [False, True], ids=["linear", "packed"])
def test_retrain_and_transformers_forwards_sample_alike(shape: str, params: SamplingParams, packed: bool,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Same draws, so the same tokens; logprobs within fp32 rounding of each other (1e-5 plus
    2e-6 of the logprob). `packed`:
    the CPU's oneDNN-packed products, which only large matrices in long calls get."""
    from retrain.inference_engine.pytorch.forward import lean, linear

    if packed:
        monkeypatch.setattr(linear, "PACK_MIN_NUMEL", 0)
        monkeypatch.setattr(lean, "PACK_MIN_STEPS", 0)
    model = model_of(shape)
    if shape == "qwen2" or shape in FAMILIES:  # LoRA beside packed q/k/v with biases; on every linear of a family
        targets = ["q_proj", "v_proj", "up_proj"] if shape == "qwen2" else every_linear(shape)
        model = with_lora(model, targets, 0.2)
    stats = SampleStats()
    # transformers counts Llama 4's temperature positions from the cache's length, a left-padded
    # row's padding included: its reference is each prompt alone (the trainer's right-padded
    # forward agrees with retrain's padded one: the family matrix)
    alone = [[p] for p in PROMPTS] if shape == "llama4_text" else [PROMPTS]
    ours = [g for prompts in alone for g in sample(model, params, stats=stats, prompts=prompts)]
    assert stats.decoder == "retrain"
    theirs = [g for prompts in alone for g in sample(model, params, decoder="transformers", prompts=prompts)]
    for mine, ref in zip((c for g in ours for c in g), (c for g in theirs for c in g), strict=True):
        assert mine.token_ids == ref.token_ids
        # fp32 rounding grows with the logprob's size: oneDNN's packed products sum in another
        # order, and on some CPUs a -9 logprob (random weights, 8,192 tokens) moved by 1.07e-5
        assert all(abs(x - y) < 1e-5 + 2e-6 * abs(y) for x, y in zip(mine.logprobs, ref.logprobs, strict=True))


def with_lora(model: torch.nn.Module, targets: list[str] | str, spread: float) -> torch.nn.Module:
    """`model` with LoRA r4 (scaling 2) on `targets`, B drawn N(0, spread) so it acts. A is
    peft's init from the global generator: seeded here, so a test's model does not depend on
    the tests run before it in its worker."""
    from peft import LoraConfig, get_peft_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=targets))
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, spread, generator=torch.Generator().manual_seed(len(name)))
    return model


def test_sampled_tokens_follow_the_distribution_like_generate() -> None:
    """The first token of 6,000 samples, from retrain's engine and from transformers'
    `generate`, against the model's exact tempered and truncated distribution (chi-square
    within 5 standard deviations of its degrees of freedom), and the engine's logprobs are
    that distribution's."""
    model = model_of("qwen3")
    prompt = [[5, 9, 13]]
    for params, kwargs in ((SamplingParams(max_tokens=1, temperature=1.3), dict(temperature=1.3, top_k=0)),
                           (SamplingParams(max_tokens=1, temperature=0.8, top_k=30, top_p=0.95),
                            dict(temperature=0.8, top_k=30, top_p=0.95))):
        with torch.no_grad():
            logits = model(torch.tensor(prompt)).logits[0, -1].float()
        exact = _truncated(logits, params)
        ours = sample(model, params, n=6000, prompts=prompt, eos=10_000)[0]
        counts = torch.bincount(torch.tensor([c.token_ids[0] for c in ours]), minlength=exact.numel()).float()
        assert _chi2_ok(counts, exact)
        for c in ours[:50]:
            assert abs(c.logprobs[0] - float(exact[c.token_ids[0]].log())) < 1e-5
        torch.manual_seed(0)
        ids = torch.tensor(prompt).repeat(6000, 1)
        drawn = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=1,
                               min_new_tokens=1, pad_token_id=0, **kwargs)[:, -1]
        assert _chi2_ok(torch.bincount(drawn, minlength=exact.numel()).float(), exact)


def _truncated(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The sampling distribution by brute force, from the definition in choice.py."""
    p = torch.softmax(logits / params.temperature, -1)
    order = torch.argsort(p, descending=True)
    kept = torch.zeros_like(p)
    sorted_p = p[order]
    if params.top_k > 0:
        sorted_p[params.top_k:] = 0
        sorted_p = sorted_p / sorted_p.sum()
    mass = 0.0
    for i, q in enumerate(sorted_p.tolist()):
        if mass >= params.top_p:
            sorted_p[i] = 0
        mass += q
    kept[order] = sorted_p
    return kept / kept.sum()


def _chi2_ok(counts: torch.Tensor, probs: torch.Tensor) -> bool:
    n = counts.sum()
    expected = probs * n
    big = expected >= 5  # pool the rare tokens into one cell
    cells_obs = torch.cat([counts[big], counts[~big].sum()[None]])
    cells_exp = torch.cat([expected[big], expected[~big].sum()[None]])
    cells_obs, cells_exp = cells_obs[cells_exp > 0], cells_exp[cells_exp > 0]
    chi2 = float(((cells_obs - cells_exp) ** 2 / cells_exp).sum())
    df = cells_exp.numel() - 1
    return chi2 < df + 5 * (2 * df) ** 0.5


def test_top_k_1_is_greedy_with_logprob_0() -> None:
    logits = torch.randn(64, 50)
    c = choose(logits, SamplingParams(max_tokens=1, temperature=1.7, top_k=1), torch.Generator().manual_seed(0))
    assert torch.equal(c.token, logits.argmax(-1)) and torch.all(c.logprob == 0)


def test_a_draw_never_lands_on_a_token_outside_the_kept_set() -> None:
    """Uniforms at the edges of [0, 1) still pick a kept token."""
    logits = torch.tensor([[2.0, 1.0, -50.0, -60.0]]).repeat(4, 1)
    for params in (SamplingParams(max_tokens=1, top_p=0.5), SamplingParams(max_tokens=1)):
        c = choose(logits, params, uniform=torch.tensor([0.0, 0.5, 1 - 2**-24, 0.9999999]))
        assert torch.all(torch.isfinite(c.logprob))
        assert set(c.token.tolist()) <= ({0} if params.top_p < 1 else {0, 1})


def _eos_prone(shape: str) -> tuple[torch.nn.Module, int]:
    """A model that ends about a third of its rows at each step (a large EOS logit)."""
    model = model_of(shape)
    eos = 3
    with torch.no_grad():
        model.lm_head.weight[eos] = 0.0
        model.lm_head.bias = torch.nn.Parameter(torch.zeros(model.lm_head.out_features))
        model.lm_head.bias[eos] = 2.5
    return model, eos


@pytest.mark.parametrize("shape,decoder", [("llama", "transformers"), ("llama", "retrain"),
                                          *((f, "retrain") for f in FAMILIES)])
def test_finished_rows_are_compacted_and_rows_never_depend_on_their_neighbours(shape: str, decoder: str) -> None:
    """A row set decoded alone and decoded beside another (other seed, longer max_tokens: the
    batch compacts at other moments) gives the same completions."""
    model, eos = _eos_prone(shape)
    mine = RowSet([[5, 9, 13], [4]], 16, SamplingParams(max_tokens=12), torch.Generator().manual_seed(1))
    alone_stats = SampleStats()
    alone = decode(model, [mine], [eos], 0, stats=alone_stats, decoder=decoder)[0]
    mine.generator = torch.Generator().manual_seed(1)
    other = RowSet([[8, 8, 8, 8]], 24, SamplingParams(max_tokens=30, temperature=0.9), torch.Generator().manual_seed(7))
    stats = SampleStats()
    together = decode(model, [other, mine], [eos], 0, stats=stats, decoder=decoder)
    assert [(c.token_ids, c.finish_reason) for c in together[1]] == [(c.token_ids, c.finish_reason) for c in alone]
    for a, b in zip(together[1], alone, strict=True):
        assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)), default=0.0) < 1e-5
    assert alone_stats.compactions > 0 and stats.compactions > 0
    assert stats.row_steps < stats.decode_steps * (16 * 2 + 24)  # compacted rows stop costing
    lengths = {len(c.token_ids) for c in alone}
    assert len(lengths) > 3 and all(c.finish_reason == "stop" for c in alone if len(c.token_ids) < 12)


def test_unsupported_architectures_fall_back_and_retrain_refuses_them() -> None:
    config = AutoConfig.for_model("gpt2", vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).eval()
    stats = SampleStats()
    out = sample(model, SamplingParams(max_tokens=4), stats=stats, eos=63)
    assert stats.decoder == "transformers" and "gpt2" in stats.decoder_note and len(out) == 3
    with pytest.raises(RuntimeError, match="retrain's decoder cannot run this model: model type 'gpt2'"):
        sample(model, SamplingParams(max_tokens=4), decoder="retrain", eos=63)


def test_seeded_sampling_is_bit_reproducible() -> None:
    model = model_of("qwen3")
    params = SamplingParams(max_tokens=10, temperature=0.9, top_p=0.95)
    a, b = sample(model, params, seed=5), sample(model, params, seed=5)
    assert [(c.token_ids, c.logprobs) for g in a for c in g] == [(c.token_ids, c.logprobs) for g in b for c in g]


OPTION_CASES = {
    "defaults": (),
    "gradient checkpointing": (),  # CUDA-only for users; the test turns it on underneath
    "lora dropout": ("--lora.dropout", "0.3"),
    "lora_freeze_a": ("--backend-opt", "lora_freeze_a=true"),
    "lora_detach_input": ("--backend-opt", "lora_detach_input=true"),
    "strict_deterministic": ("--backend-opt", "strict_deterministic=true"),
    "train_full_model": ("--backend-opt", "train_full_model=true"),
    "unmerged lora": ("--backend-opt", "sample_merged_lora=false"),
    "torch kernels": ("--backend-opt", "kernels=torch"),
    "transformers decoder": ("--backend-opt", "sample_decoder=transformers"),
    "no kv cache": ("--backend-opt", "sample_use_cache=false"),
}


@pytest.fixture
def undo_strict():  # type: ignore[no-untyped-def]
    """strict_deterministic switches torch process-wide; later tests of this worker run without."""
    from retrain.backends.local import determinism

    yield
    determinism._established = False
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False


@pytest.mark.parametrize("case", sorted(OPTION_CASES))
def test_the_backend_samples_under_every_option_that_changes_the_model(tiny_config, undo_strict, case: str) -> None:  # type: ignore[no-untyped-def]
    """After a training step (the model in training mode, LoRA B non-zero), a sample's
    logprobs are the policy's in eval mode, and training mode is back afterwards."""
    from retrain.backends.local.backend import LocalBackend
    from retrain.backends.local.batch import collate
    from retrain.backends.local.logprobs import action_logprobs
    from retrain.backends.local.memory import configure_checkpointing
    from retrain.types import Datum

    backend = LocalBackend(tiny_config(*OPTION_CASES[case]))
    if case == "gradient checkpointing":
        configure_checkpointing(backend.model, True, "auto", 0)
        backend.model.train()
    prompts = [backend.tokenizer.encode_prompt(f"{i}+{i}=") for i in range(3)]
    warm = backend.sample(prompts, 2, SamplingParams(max_tokens=6))
    datums = [Datum(tokens=p + c.token_ids, logprobs=[0.0] * len(p) + c.logprobs,
                    advantages=[0.0] * len(p) + [1.0 - 0.5 * k] * len(c.token_ids))
              for p, g in zip(prompts, warm, strict=True) for k, c in enumerate(g)]
    backend.train_step(datums, 5e-2, 0.0)
    assert backend.model.training
    out = backend.sample(prompts, 3, SamplingParams(max_tokens=8))
    assert backend.model.training
    metrics = backend.runtime_metrics()
    want = "transformers" if case in ("transformers decoder", "no kv cache") else "retrain"
    assert metrics["engine_decoder"] == want
    rows = [Datum(tokens=p + c.token_ids, logprobs=[0.0] * len(p) + c.logprobs,
                  advantages=[0.0] * len(p) + [1.0] * len(c.token_ids)) for p, g in zip(prompts, out, strict=True) for c in g]
    batch = collate(rows, backend.tokenizer.pad_token_id, backend.device)
    backend.model.eval()
    with torch.no_grad():
        policy = action_logprobs(backend.model, batch.input_ids, batch.attention_mask, batch.action, 1.0)
    backend.model.train()
    gap = float((policy - batch.old_logprobs[batch.action]).abs().max())
    assert gap < 1e-4, gap


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
@pytest.mark.parametrize("shape", ["qwen3", "llama", *FAMILIES])
def test_on_cuda_graphed_decoding_matches_the_training_forward(shape: str) -> None:
    """Under bf16 autocast (how the local backend runs on CUDA): graphs captured and replayed,
    each sampled token's logprob within bf16 rounding of transformers' full-sequence forward,
    and the eager step drawing the same tokens as the graphed one."""
    model, eos = _eos_prone(shape)
    model = model.cuda()
    params = SamplingParams(max_tokens=24)
    runs = {}
    for graphs in (True, False):
        stats = SampleStats()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            runs[graphs] = generate(model, PROMPTS, 8, params, [eos], 0, torch.Generator("cuda").manual_seed(0),
                                    stats=stats, cuda_graphs=graphs)
        assert stats.decoder == "retrain" and stats.decoder_note == "", stats.decoder_note
        assert (stats.graph_captures > 0 and stats.graph_replays > 0) == graphs
    gap = []
    for prompt, group in zip(PROMPTS, runs[True], strict=True):
        for c in group:
            ids = torch.tensor([prompt + c.token_ids], device="cuda")
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                logp = torch.log_softmax(model(ids).logits[0, len(prompt) - 1:-1].float(), -1)
            want = logp.gather(-1, ids[0, len(prompt):, None]).squeeze(-1)
            gap.extend((want - torch.tensor(c.logprobs, device="cuda")).abs().tolist())
    assert max(gap) < 0.1 and sum(gap) / len(gap) < 0.01, (max(gap), sum(gap) / len(gap))
    same = sum(a.token_ids == b.token_ids for g, h in zip(runs[True], runs[False], strict=True)
               for a, b in zip(g, h, strict=True))
    assert same >= 0.9 * len(PROMPTS) * 8


@needs_cuda
def test_on_cuda_the_backend_samples_with_its_default_options(tiny_config) -> None:  # type: ignore[no-untyped-def]
    """The first GPU run failed here: gradient checkpointing is on by default on CUDA."""
    from retrain.backends.local.backend import LocalBackend

    backend = LocalBackend(tiny_config("--devices", "gpu:0"))
    assert backend.runtime_metrics()["local_checkpointed_layers"] > 0
    prompts = [backend.tokenizer.encode_prompt(f"{i}+{i}=") for i in range(4)]
    out = backend.sample(prompts, 4, SamplingParams(max_tokens=16))
    metrics = backend.runtime_metrics()
    assert metrics["engine_decoder"] == "retrain" and metrics["engine_cuda_graph_captures"] > 0
    assert "engine_decoder_note" not in metrics, metrics.get("engine_decoder_note")
    assert all(1 <= len(c.token_ids) <= 16 for g in out for c in g) and backend.model.training


@pytest.mark.parametrize("shape", ["qwen3", "qwen2", *FAMILIES])
def test_under_bf16_autocast_the_stacked_products_follow_transformers(shape: str) -> None:
    """Autocast (how CUDA runs) makes the decoder stack q/k/v and gate/up into single bf16
    products with the LoRA deltas folded in; on the CPU's autocast that path is checked
    against transformers' forward under the same autocast."""
    model = with_lora(model_of(shape), every_linear(shape), 0.3)
    params = SamplingParams(max_tokens=12)
    runs = {}
    for decoder in ("retrain", "transformers"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            runs[decoder] = sample(model, params, decoder=decoder, n=4)  # "retrain" raises where it cannot run
    ours = [c for g in runs["retrain"] for c in g]
    theirs = [c for g in runs["transformers"] for c in g]
    assert sum(a.token_ids == b.token_ids for a, b in zip(ours, theirs, strict=True)) >= 0.75 * len(ours)
    gaps = [abs(x - y) for a, b in zip(ours, theirs, strict=True) if a.token_ids == b.token_ids
            for x, y in zip(a.logprobs, b.logprobs, strict=True)]
    # Qwen3-Next: one token's logprob 0.0515 apart (mean 0.0012), bf16 rounding: each engine is as
    # far from the fp32 forward (max 0.042 transformers', 0.052 retrain's; means 0.0023, 0.0027)
    bound = 0.06 if shape == "qwen3_next" else 0.05
    assert max(gaps) < bound and sum(gaps) / len(gaps) < 0.01, (max(gaps), sum(gaps) / len(gaps))


@pytest.mark.parametrize("shape", ["llama", *FAMILIES])
def test_the_graphed_step_attending_every_column_equals_the_eager_one(shape: str) -> None:
    """A CUDA graph has one shape: its step attends over all columns, the unwritten ones held
    off by the -inf key mask (a sliding window's columns out of reach too). The same call on
    the CPU gives the eager step's logits."""
    from retrain.inference_engine.pytorch.forward.lean import LeanForward
    from retrain.inference_engine.pytorch.sample import left_pad

    model = model_of(shape)
    ids, mask = left_pad(PROMPTS, 0, torch.device("cpu"))
    expand = torch.repeat_interleave(torch.arange(len(PROMPTS)), 2)
    eager = LeanForward(model, None, ids, mask, expand, 10)
    full = LeanForward(model, None, ids, mask, expand, 10)
    full.graphs = lambda n: full.step_logits(n, full.columns)  # type: ignore[assignment]
    with torch.inference_mode():
        a, b = eager.first_logits(), full.first_logits()
        for step in range(8):
            token = a.argmax(-1)
            assert torch.equal(token, b.argmax(-1)) and torch.allclose(a, b, atol=1e-5), step
            if step == 4:
                keep = torch.tensor([0, 2, 3, 5])
                eager.compact(keep)
                full.compact(keep)
                token = token[keep]
            a, b = eager.next_logits(token), full.next_logits(token)
