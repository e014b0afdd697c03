"""Every decoder family transformers ships that people RL-train, on a tiny random checkpoint
written as the hub ships it: greedy sampling equals `generate`, the sampler's logprobs equal
the trainer's recomputation (fp32, CPU), two RL steps train, and a checkpoint resumes to the
same policy and the same next sample. The decoder each family ends on is pinned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny_families import SHAPES, hub_model, write_checkpoint

from retrain.backends.local.backend import LocalBackend
from retrain.backends.local.batch import collate
from retrain.backends.local.logprobs import action_logprobs
from retrain.types import Datum, SamplingParams

#: the model types retrain's decoder runs (a multimodal checkpoint's through its text model,
#: which retrain loads alone); the rest decode on transformers' forward, with the reason in
#: engine_decoder_note
RETRAIN_DECODER = {"llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "olmoe", "qwen2_moe", "gpt_oss",
                   "deepseek_v3", "glm4_moe", "llama4_text", "qwen3_next", "qwen3_5", "qwen3_5_text", "gemma3", "gemma3_text",
                   "gemma4", "gemma4_text"}
PROMPTS = [[1, 20, 30, 40, 50, 60, 70], [1, 33, 44]]


def backend_of(tiny_config, folder: Path, *flags: str) -> LocalBackend:  # type: ignore[no-untyped-def]
    return LocalBackend(tiny_config("--model", str(folder), "--max-tokens", "8", *flags))


def datums_of(prompts: list[list[int]], groups) -> list[Datum]:  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(0)
    out = []
    for p, group in zip(prompts, groups, strict=True):
        for c in group:
            adv = torch.randn(len(c.token_ids), generator=g).tolist()
            out.append(Datum(tokens=p + c.token_ids, logprobs=[0.0] * len(p) + c.logprobs,
                             advantages=[0.0] * len(p) + adv))
    return out


def sampler_trainer_gap(backend: LocalBackend, datums: list[Datum]) -> float:
    batch = collate(datums, backend.tokenizer.pad_token_id, backend.device)
    with torch.no_grad():
        train = action_logprobs(backend.model, batch.input_ids, batch.attention_mask, batch.action, 1.0)
    return float((train - batch.old_logprobs[batch.action]).abs().max())


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_family_samples_exactly_trains_and_resumes(name: str, tiny_config, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = write_checkpoint(name, tmp_path / "model")
    backend = backend_of(tiny_config, folder)
    eos = backend.tokenizer.eos_token_ids
    greedy = backend.sample(PROMPTS, 1, SamplingParams(max_tokens=8, temperature=0.0))
    policy = backend.sampler.model if backend.sampler is not None else backend.model
    for prompt, group in zip(PROMPTS, greedy, strict=True):
        ids = torch.tensor([prompt])
        want = policy.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=8,
                               pad_token_id=0, eos_token_id=eos)[0, len(prompt):].tolist()
        assert group[0].token_ids == want[:len(group[0].token_ids)] and len(group[0].token_ids) == len(want)
    metrics = backend.runtime_metrics()
    decoder = "retrain" if SHAPES[name][0] in RETRAIN_DECODER else "transformers"
    assert metrics["engine_decoder"] == decoder, metrics.get("engine_decoder_note")
    if decoder == "transformers":
        assert f"model type {SHAPES[name][0]!r}: " in str(metrics["engine_decoder_note"])

    for _ in range(2):
        groups = backend.sample(PROMPTS, 2, SamplingParams(max_tokens=8))
        datums = datums_of(PROMPTS, groups)
        assert sampler_trainer_gap(backend, datums) < 1e-4
        assert backend.train_step(datums, 1e-2, 0.0).tokens > 0
    assert sampler_trainer_gap(backend, datums_of(PROMPTS, backend.sample(PROMPTS, 2, SamplingParams(max_tokens=8)))) < 1e-4
    path = backend.save_checkpoint(str(tmp_path / "ckpt"))
    after = backend.sample(PROMPTS, 2, SamplingParams(max_tokens=8))

    resumed = backend_of(tiny_config, folder)
    resumed.load_checkpoint(path)
    trained = {k: v for k, v in backend.model.state_dict().items() if "lora_" in k}
    assert trained and all(torch.equal(v, resumed.model.state_dict()[k]) for k, v in trained.items())
    again = resumed.sample(PROMPTS, 2, SamplingParams(max_tokens=8))
    assert [[c.token_ids for c in g] for g in again] == [[c.token_ids for c in g] for g in after]


@pytest.mark.parametrize("name", ["qwen3_5 multimodal", "gemma3 multimodal", "gemma4 multimodal"])
def test_a_multimodal_checkpoint_trains_its_text_model_and_saves_the_hubs_adapter(
        name: str, tiny_config, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The text model alone: no tower tensor loaded, the same logits as the hub's class on text,
    LoRA on the text model's linears by their names, the adapter loading onto the hub's class."""
    from peft import PeftModel

    folder = write_checkpoint(name, tmp_path / "model")
    backend = backend_of(tiny_config, folder)
    names = [n for n, _ in backend.model.named_parameters()]
    assert not any(part in n for n in names for part in ("visual", "vision", "audio"))
    hub = hub_model(name)
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        assert torch.equal(hub(input_ids=ids).logits, backend.model(input_ids=ids).logits)
    targets = backend.model.peft_config["default"].target_modules
    assert targets and all(t.startswith("model.layers.") for t in targets)

    backend.train_step(datums_of(PROMPTS, backend.sample(PROMPTS, 2, SamplingParams(max_tokens=8))), 1e-2, 0.0)
    saved = Path(backend.save_adapter(str(tmp_path / "adapter")))
    config = json.loads((saved / "adapter_config.json").read_text())
    assert all(t.startswith("model.language_model.layers.") for t in config["target_modules"])
    loaded = PeftModel.from_pretrained(hub_model(name), str(saved)).eval()
    with torch.no_grad():
        want = backend.model(input_ids=ids).logits
        assert torch.allclose(loaded(input_ids=ids).logits, want, atol=1e-5)
    # `retrain serve` on the same checkpoint loads the hub-named adapter onto its text model
    from retrain.inference_engine.pytorch import serving

    engine = serving.create(tiny_config("--model", str(folder)))
    try:
        engine.load_adapter("trained", str(saved)).result(timeout=120)
        with torch.no_grad():
            assert torch.allclose(engine.model(input_ids=ids).logits, want, atol=1e-5)
        assert engine.eos_ids == backend.tokenizer.eos_token_ids
    finally:
        engine.close()


@pytest.mark.parametrize("name,token", [("qwen3_5 multimodal", "<|im_end|>"), ("gemma3 text", "<end_of_turn>"),
                                        ("gemma4 multimodal", "<turn|>")])
def test_a_family_stops_at_its_end_of_turn(name: str, token: str, tiny_config, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    backend = backend_of(tiny_config, write_checkpoint(name, tmp_path / "model"))
    end = backend.tokenizer.hf.convert_tokens_to_ids(token)
    assert backend.tokenizer.eos_token_ids[0] == 2 and end in backend.tokenizer.eos_token_ids
    others = set(backend.tokenizer.hf.convert_tokens_to_ids(["<|im_end|>", "<end_of_turn>", "<turn|>"])) - {end}
    assert not others & set(backend.tokenizer.eos_token_ids)


@pytest.mark.parametrize("window", [4, 64])
def test_a_sliding_window_is_read_from_the_config(window: int) -> None:
    """transformers 5 keeps `sliding_window` on the config, where retrain's decoder reads it: a
    window shorter than the sequence is one (it used to be ignored: other tokens than
    transformers' and a 0.28 logprob gap), one no shorter is full attention."""
    from retrain.inference_engine.pytorch.sample import SampleStats, generate

    model = hub_model("mistral short window")
    model.config.sliding_window = window
    stats = SampleStats()
    params = SamplingParams(max_tokens=12, temperature=0.0)
    ours = generate(model, PROMPTS, 1, params, [2], 0, stats=stats)
    assert stats.decoder == "retrain", stats.decoder_note
    theirs = generate(model, PROMPTS, 1, params, [2], 0, decoder="transformers")
    for a, b in zip((c for g in ours for c in g), (c for g in theirs for c in g), strict=True):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5


@pytest.mark.parametrize("name", ["qwen3_5 multimodal", "gemma3 multimodal"])
def test_full_weights_of_a_text_model_resume(name: str, tiny_config, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """transformers saves these text models' full weights under the hub's names
    (`model.language_model.*`, Gemma 3's `language_model.model.*`); a resume reads them back."""
    folder = write_checkpoint(name, tmp_path / "model")
    flags = ("--backend-opt", "train_full_model=true")
    backend = backend_of(tiny_config, folder, *flags)
    backend.train_step(datums_of(PROMPTS, backend.sample(PROMPTS, 2, SamplingParams(max_tokens=8))), 1e-3, 0.0)
    path = backend.save_checkpoint(str(tmp_path / "ckpt"))
    resumed = backend_of(tiny_config, folder, *flags)
    resumed.load_checkpoint(path)
    assert all(torch.equal(v, resumed.model.state_dict()[k]) for k, v in backend.model.state_dict().items())
