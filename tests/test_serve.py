"""`retrain serve` in a subprocess on 127.0.0.1, driven by the real `openai` client and by
retrain's own OpenAI-compatible engine: completions, chat, token-id prompts, n, logprobs equal
to the in-process engine's for the same seed and adapter, adapter load/unload, streaming with
usage, and the server's standards (API key, adapter root, 400 naming the field)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from serving import Served, start_server

# one `retrain serve` for the module: its tests go to one xdist worker, which starts it once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("retrain-serve")]
KEY = "s3cret-test-key"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = start_server(tmp_path_factory.mktemp("serve"), api_key=KEY)
    yield served
    served.stop()
    err = served.proc.stderr.read() if served.proc.stderr else ""
    assert KEY not in err


@pytest.fixture(scope="module")
def client(server: Served):  # type: ignore[no-untyped-def]
    from openai import OpenAI

    return OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)


def tiny(seed: int = 0):  # type: ignore[no-untyped-def]
    from retrain.backends.tokenizer import HFTokenizer
    from retrain.models.load import ModelSpec, load_model, load_tokenizer

    torch.set_num_threads(1)
    return load_model(ModelSpec("tiny"), seed=seed).eval(), HFTokenizer(load_tokenizer(ModelSpec("tiny")))


@pytest.fixture(scope="module")
def adapter(server: Served) -> Path:
    """A LoRA adapter with non-zero B (so it changes the policy) under the adapter root."""
    from peft import LoraConfig, get_peft_model

    model, _ = tiny()
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"]))
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    folder = server.root / "adapters" / "a1"
    peft.save_pretrained(str(folder))
    return folder


def in_process(prompt: list[int], n: int, seed: int, adapter: Path | None, **params: float):  # type: ignore[no-untyped-def]
    from peft import PeftModel

    from retrain.inference_engine.pytorch.sample import generate
    from retrain.types import SamplingParams

    model, tok = tiny()
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter)).eval()
    return generate(model, [prompt], n, SamplingParams(max_tokens=8, **params), tok.eos_token_ids, tok.pad_token_id,
                    torch.Generator().manual_seed(seed))[0]


def test_completions_text_prompt_n_and_logprobs(client) -> None:  # type: ignore[no-untyped-def]
    out = client.completions.create(model="tiny", prompt="12+30=", max_tokens=6, n=3, logprobs=2, seed=1)
    assert len(out.choices) == 3 and out.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in out.choices)
    for c in out.choices:
        assert c.finish_reason in ("stop", "length") and len(c.logprobs.token_logprobs) == len(c.logprobs.tokens)
        assert all(lp <= 0 for lp in c.logprobs.token_logprobs)
        assert all(len(alts) == 2 for alts in c.logprobs.top_logprobs)


def test_token_id_prompts_give_the_in_process_engines_samples(server: Served, client, adapter: Path) -> None:  # type: ignore[no-untyped-def]
    _, tok = tiny()
    prompt = tok.encode_prompt("7+8=")
    client.post("/load_lora_adapter", cast_to=httpx.Response,
                body={"lora_name": "a1", "lora_path": str(adapter)})
    for model, folder in (("tiny", None), ("a1", adapter)):
        out = client.completions.create(model=model, prompt=prompt, max_tokens=8, n=4, logprobs=1, seed=11,
                                        temperature=1.0)
        want = in_process(prompt, 4, 11, folder, temperature=1.0)
        for choice, c in zip(out.choices, want, strict=True):
            assert choice.model_extra["token_ids"] == c.token_ids
            assert choice.logprobs.token_logprobs == pytest.approx(c.logprobs, abs=1e-5)
    base = client.completions.create(model="tiny", prompt=prompt, max_tokens=8, n=4, logprobs=1, seed=11)
    lora = client.completions.create(model="a1", prompt=prompt, max_tokens=8, n=4, logprobs=1, seed=11)
    assert [c.logprobs.token_logprobs for c in base.choices] != [c.logprobs.token_logprobs for c in lora.choices]
    loads = server.counters()["adapter_loads_total"]
    r = httpx.post(server.url + "/v1/unload_lora_adapter", json={"lora_name": "a1"}, headers=server.headers)
    assert r.status_code == 200 and "removed" in r.text
    r = httpx.post(server.url + "/v1/completions", json={"model": "a1", "prompt": prompt}, headers=server.headers)
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"
    assert server.counters()["adapter_unloads_total"] >= 1 and loads >= 1


def test_chat_and_streaming_with_usage(client) -> None:  # type: ignore[no-untyped-def]
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "2+2="}], max_tokens=5,
                                          n=2, logprobs=True, top_logprobs=1, seed=3)
    assert len(chat.choices) == 2 and chat.choices[0].message.role == "assistant"
    assert len(chat.choices[0].logprobs.content) == chat.usage.completion_tokens // 2 or chat.usage.completion_tokens
    stream = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "2+2="}], max_tokens=5,
                                            seed=3, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5 and not chunks[-1].choices
    same = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "2+2="}], max_tokens=5,
                                          seed=3)
    assert text == same.choices[0].message.content
    comp = list(client.completions.create(model="tiny", prompt="1+1=", max_tokens=4, stream=True, seed=5,
                                          stream_options={"include_usage": True}))
    assert comp[-1].usage.completion_tokens == 4
    finish = [c.choices[0].finish_reason for c in comp if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"]


def test_stop_strings_cut_the_text(client) -> None:  # type: ignore[no-untyped-def]
    out = client.completions.create(model="tiny", prompt="3+4=", max_tokens=12, n=4, seed=2)
    text = out.choices[0].text
    assert len(text) >= 3
    stop = text[2]
    cut = client.completions.create(model="tiny", prompt="3+4=", max_tokens=12, n=4, seed=2, stop=[stop])
    first = cut.choices[0]
    assert first.text == text[:text.index(stop)] and first.finish_reason == "stop"


def test_top_k_1_through_the_server_is_greedy(client) -> None:  # type: ignore[no-untyped-def]
    a = client.completions.create(model="tiny", prompt="5+5=", max_tokens=6, n=2, logprobs=1, seed=1,
                                  temperature=1.5, extra_body={"top_k": 1})
    b = client.completions.create(model="tiny", prompt="5+5=", max_tokens=6, logprobs=1, seed=9, temperature=0.0)
    assert a.choices[0].text == a.choices[1].text == b.choices[0].text
    assert a.choices[0].logprobs.token_logprobs == [0.0] * 6


def test_token_in_generate_is_what_verifiers_train_client_reads(server: Served) -> None:
    """vLLM's /inference/v1/generate through the real `renderers` client verifiers' TrainClient
    uses: the tiny tokenizer's chat template renders the prompt, the server answers the
    in-process engine's tokens and logprobs for the same seed."""
    import asyncio

    from openai import AsyncOpenAI
    from renderers import create_renderer
    from renderers.base import load_tokenizer
    from renderers.client import generate

    from retrain.models.tiny import ASSETS

    renderer = create_renderer(load_tokenizer(str(ASSETS)))
    messages = [{"role": "user", "content": "7+8="}]

    async def call() -> dict:
        client = AsyncOpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
        return await generate(client=client, renderer=renderer, messages=messages, model="tiny",
                              sampling_params={"max_tokens": 8, "temperature": 1.0, "seed": 5})

    out = asyncio.run(call())
    _, tok = tiny()
    assert out["prompt_ids"] == tok.encode_chat(messages)
    (want,) = in_process(out["prompt_ids"], 1, 5, None, temperature=1.0)
    assert out["completion_ids"] == want.token_ids and out["finish_reason"] == want.finish_reason
    assert out["completion_logprobs"] == pytest.approx(want.logprobs, abs=1e-5)
    h = server.headers
    for body, field in (({"token_ids": [1], "sampling_params": {"repetition_penalty": 1.1}},
                         "sampling_params.repetition_penalty"),
                        ({"token_ids": [1], "sampling_params": {"stop_token_ids": [7]}}, "sampling_params.stop_token_ids"),
                        ({"token_ids": []}, "token_ids"), ({"token_ids": [1], "extra": 1}, "extra")):
        r = httpx.post(server.url + "/inference/v1/generate", json=body, headers=h, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
    assert httpx.post(server.url + "/inference/v1/generate", json={"token_ids": [1]}).status_code == 401


def test_bad_requests_name_the_field_and_never_500(server: Served) -> None:
    h = server.headers
    cases = [({"model": "tiny", "prompt": "x", "temperature": -1}, "temperature"),
             ({"model": "tiny", "prompt": "x", "n": 0}, "n"),
             ({"model": "tiny", "prompt": []}, "prompt"),
             ({"model": "tiny", "prompt": [999999]}, "prompt"),
             ({"model": "tiny", "prompt": "x", "max_tokens": 100000}, "max_tokens"),
             ({"model": "tiny", "prompt": "x", "repetition_penalty": 1.2}, "repetition_penalty"),
             ({"prompt": "x"}, "model")]
    for body, field in cases:
        r = httpx.post(server.url + "/v1/completions", json=body, headers=h, timeout=30)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["param"] == field and field in r.json()["error"]["message"], r.text
    r = httpx.post(server.url + "/v1/completions", content=b"{not json", headers={**h, "content-type": "application/json"})
    assert r.status_code == 400
    r = httpx.post(server.url + "/v1/chat/completions", json={"model": "tiny", "messages": []}, headers=h)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


def test_api_key_and_adapter_root(server: Served, tmp_path: Path) -> None:
    r = httpx.get(server.url + "/v1/models")
    assert r.status_code == 401 and KEY not in r.text
    r = httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and "wrong" not in r.text
    assert httpx.get(server.url + "/health").status_code == 200
    r = httpx.post(server.url + "/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": str(tmp_path)},
                   headers=server.headers)
    assert r.status_code == 400 and r.json()["error"]["param"] == "lora_path" and "outside" in r.text
    models = httpx.get(server.url + "/v1/models", headers=server.headers).json()
    assert models["data"][0]["id"] == "tiny"


@pytest.mark.parametrize("kind", ["vllm", "sglang", "openai"])
def test_the_engine_samples_and_reloads_on_retrain_serve(server: Served, adapter: Path, kind: str) -> None:
    from retrain.backends.local.server import codec_for
    from retrain.inference_engine.openai.engine import OpenAIEngine
    from retrain.types import SamplingParams

    _, tok = tiny()
    import os

    os.environ.pop("RETRAIN_INFERENCE_API_KEY", None)
    engine = OpenAIEngine(kind, server.url, codec_for(tok), adapter_name=f"run-{kind}", api_key=KEY, retries=0)
    try:
        assert "tiny" in engine.start()
        before = server.counters()["adapter_loads_total"]
        engine.reload(str(adapter))
        engine.reload(str(adapter))
        assert server.counters()["adapter_loads_total"] == before + 2
        prompts = [tok.encode_prompt("7+8="), tok.encode_prompt("1+2=")]
        out = engine.generate(prompts, 4, SamplingParams(max_tokens=8, temperature=1.0), seeds=[11, 12])
        want = in_process(prompts[0], 4, 11, adapter, temperature=1.0)
        if kind != "openai":  # text prompts: the tiny tokenizer's chat markers re-encode differently
            assert [c.token_ids for c in out[0]] == [c.token_ids for c in want]
            for got, c in zip(out[0], want, strict=True):
                assert got.logprobs == pytest.approx(c.logprobs, abs=1e-5)
        m = engine.metrics()
        assert m["engine_requests"] == 2 and m["engine_adapter_reload_calls"] == 2
        assert m["engine_token_prompt_calls"] == (2 if kind != "openai" else 0)
        assert m["engine_token_recovery_ids"] == 8
    finally:
        engine.close()


def test_health_and_metrics_are_json_free_text(server: Served) -> None:
    c = server.counters()
    assert c["requests_total"] >= 1 and "busy_s" in c
    assert json.dumps(c)


def test_doctor_probes_the_configured_server(server: Served, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[inference]\nengine = "vllm"\nurl = "{server.url}/v1"\n')
    env = {**os.environ, "RETRAIN_INFERENCE_API_KEY": KEY}
    res = subprocess.run([sys.executable, "-m", "retrain.cli", "doctor", str(cfg)], capture_output=True, text=True,
                         env=env, timeout=120, check=False)
    assert res.returncode == 0 and f"{server.url}: answers; serves tiny" in res.stdout, res.stdout + res.stderr
    env.pop("RETRAIN_INFERENCE_API_KEY")
    res = subprocess.run([sys.executable, "-m", "retrain.cli", "doctor", str(cfg), "--json"], capture_output=True,
                         text=True, env=env, timeout=120, check=False)
    probe = json.loads(res.stdout)["inference_server"]
    assert probe["answers"] is False and "401" in probe["error"]
