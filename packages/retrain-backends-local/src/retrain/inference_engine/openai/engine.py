"""The OpenAI-compatible engine: sample a step's groups on an inference server, push adapters.

One `/v1/completions` request per prompt with `n` = the group size, all of a step's requests
in flight at once up to `[inference] concurrency`. vLLM and SGLang take the prompt as token
ids, so the server sees exactly the tokens the trainer trains on; a server that refuses them
(400/422) gets the prompt as text from then on, and the fallback is counted. Each request
carries a seed drawn by the caller, so a seeded run samples the same completions from the
same adapter.

The trained adapter reaches the server through its LoRA endpoints. Each published version of
the weights (retrain.backends.protocol.VersionedSampler) is loaded under a name of its own,
`<run>-policy-v<N>` (`load_version`), so a request for version N finishes on N while N + 1
loads, and is unloaded once no batch samples from it (`unload_version`); the server needs room
for the versions in flight (vLLM: `--max-loras` at least `max_async_level + 2`). The latest
trained weights, for evaluation between steps, are one more adapter, `<run>-latest`, replaced
in place (`reload`: vLLM loads in place; SGLang and plain OpenAI-compatible servers unload,
then load). A server that cannot load adapters fails at the first load, before any sample,
because sampling from a stale policy would train silently on the wrong data.

Partial rollouts (`partial_tokens` > 0, `[inference] partial_rollout_tokens`): a request that
names a version samples at most that many tokens at a time; a completion still running then
continues, from the tokens it has, on the newest version published by then, so a long rollout
crosses weight updates instead of finishing on the weights it started with, each token keeping
the version that drew it (`Completion.versions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from msgspec.structs import replace

from retrain.inference_engine.openai.client import (
    HTTPStatusError,
    InferenceServerError,
    RetryPolicy,
    ServerClient,
    gather_all,
)
from retrain.inference_engine.openai.recover import SOURCES, recover
from retrain.registry.builtin import INFERENCE_DEFAULT_URLS
from retrain.types import Completion, SamplingParams

DEFAULT_URLS = INFERENCE_DEFAULT_URLS
TOKEN_NATIVE = frozenset({"vllm", "sglang"})
API_KEY_ENV = "RETRAIN_INFERENCE_API_KEY"


@dataclass
class EngineCounters:
    requests: int = 0
    token_prompt_calls: int = 0
    token_prompt_fallbacks: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    generation_wall_s: float = 0.0
    adapter_reload_calls: int = 0
    adapter_reload_s: float = 0.0
    recovered: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))


@dataclass(frozen=True)
class TextCodec:
    """What the engine needs of the tokenizer: prompt ids back to text (special tokens kept,
    for servers that take text), completion text to ids, token strings to ids."""

    prompt_text: Callable[[Sequence[int]], str]
    encode: Callable[[str], list[int]]
    token_ids: Callable[[Sequence[str]], list[int | None]]


class OpenAIEngine:
    def __init__(self, kind: str, url: str, codec: TextCodec, *, adapter_name: str, api_key: str = "",
                 concurrency: int = 64, timeout_s: float = 300.0, retries: int = 5, partial_tokens: int = 0) -> None:
        if kind not in DEFAULT_URLS:
            raise ValueError(f"unknown OpenAI-compatible engine {kind!r}")
        self.kind = kind
        self.url = (url or DEFAULT_URLS[kind]).rstrip("/")
        if self.url.endswith("/v1"):
            self.url = self.url[:-3]
        self.codec = codec
        self.adapter_name = adapter_name
        self.token_prompts = kind in TOKEN_NATIVE
        self.client = ServerClient(self.url, api_key=api_key, timeout_s=timeout_s, concurrency=concurrency,
                                   retry=RetryPolicy(retries=retries))
        self.served_model = ""
        self.adapter_loaded = False  # the `-latest` adapter
        self.versions: set[int] = set()  # the versions loaded
        self.newest = -1  # the newest version loaded (read by the sampling thread)
        self.partial_tokens = partial_tokens
        self.counters = EngineCounters()

    # -- start -------------------------------------------------------------------------------
    def start(self) -> list[str]:
        """Ask the server what it serves; the one clear error when it does not answer."""
        try:
            resp = self.client.run(self.client.request("GET", "/v1/models", what="GET /v1/models"))
        except HTTPStatusError as exc:
            raise InferenceServerError(f"inference server {self.url} answered {exc.status} to GET /v1/models; "
                                       f"is it an OpenAI-compatible server?") from None
        models = [str(m.get("id")) for m in resp.json().get("data", []) if isinstance(m, dict)]
        bases = [str(m.get("id")) for m in resp.json().get("data", [])
                 if isinstance(m, dict) and not m.get("parent")]
        if not models:
            raise InferenceServerError(f"inference server {self.url} serves no model (GET /v1/models is empty)")
        self.served_model = bases[0] if bases else models[0]
        return models

    def version_name(self, version: int) -> str:
        return f"{self.adapter_name}-policy-v{version}"

    @property
    def latest_name(self) -> str:
        return f"{self.adapter_name}-latest"

    def model_for(self, version: int | None) -> str:
        """The `model` of a request sampling `version` (None: the latest trained weights; the
        base model before any adapter is loaded)."""
        if version is None and not self.adapter_loaded:
            return self.served_model
        name = self.latest_name if version is None else self.version_name(version)
        return f"{self.served_model}:{name}" if self.kind == "sglang" else name

    # -- adapters ----------------------------------------------------------------------------
    def load_version(self, version: int, adapter_dir: str) -> None:
        """Load the adapter in `adapter_dir` (written completely before this call) as `version`."""
        self._timed(self._load(self.version_name(version), adapter_dir, replace=version in self.versions))
        self.versions.add(version)
        self.newest = max(self.newest, version)

    def unload_version(self, version: int) -> None:
        if version in self.versions:
            self._timed(self._unload(self.version_name(version)))
            self.versions.discard(version)

    def unload_all(self) -> None:
        """Every version and the latest adapter, unloaded without retries."""
        names = [self.version_name(v) for v in sorted(self.versions)] + ([self.latest_name] if self.adapter_loaded else [])
        self.versions.clear()
        self.adapter_loaded = False
        for name in names:
            self.client.run(self.client.request("POST", f"{self._lora_prefix}/unload_lora_adapter",
                                                {"lora_name": name}, what="unloading an adapter", retry=False))

    def reload(self, adapter_dir: str) -> None:
        """Make the `-latest` adapter the one in `adapter_dir`."""
        self._timed(self._load(self.latest_name, adapter_dir, replace=self.adapter_loaded))
        self.adapter_loaded = True

    def _timed(self, call: Any) -> None:
        t0 = time.perf_counter()
        self.client.run(call)
        self.counters.adapter_reload_calls += 1
        self.counters.adapter_reload_s += time.perf_counter() - t0

    @property
    def _lora_prefix(self) -> str:
        return "" if self.kind == "sglang" else "/v1"

    async def _unload(self, name: str) -> None:
        await self.client.request("POST", f"{self._lora_prefix}/unload_lora_adapter", {"lora_name": name},
                                  what="unloading an adapter")

    async def _load(self, name: str, adapter_dir: str, *, replace: bool) -> None:
        """Load `adapter_dir` as `name`, replacing what the name held (a run killed before it
        unloaded its adapters leaves them loaded for its resumed run): vLLM in place, the others
        by unloading first (`replace`: the name is known to be loaded; else whatever the
        server answers to the unload)."""
        try:
            if self.kind == "vllm":
                await self.client.request("POST", "/v1/load_lora_adapter",
                                          {"lora_name": name, "lora_path": adapter_dir, "load_inplace": True},
                                          what="loading the adapter")
                return
            if replace:
                await self._unload(name)
            else:
                with contextlib.suppress(HTTPStatusError):
                    await self.client.request("POST", f"{self._lora_prefix}/unload_lora_adapter",
                                              {"lora_name": name}, what="unloading an adapter", retry=False)
            await self.client.request("POST", f"{self._lora_prefix}/load_lora_adapter",
                                      {"lora_name": name, "lora_path": adapter_dir}, what="loading the adapter")
        except HTTPStatusError as exc:
            hint = {"vllm": " (start vLLM with --enable-lora, --max-loras >= max_async_level + 2, --max-lora-rank "
                            ">= [model] lora_rank and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)",
                    "sglang": " (start SGLang with --enable-lora and --max-lora-rank >= [model] lora_rank)"}
            raise InferenceServerError(f"inference server {self.url} cannot load the trained adapter: it answered "
                                       f"{exc.status} ({exc.body.strip()[:200]}){hint.get(self.kind, '')}") from None

    # -- sampling ----------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[list[Completion]]:
        """`params.policy_version` names the published version to sample (None: the latest)."""
        t0 = time.perf_counter()
        model = self.model_for(params.policy_version)
        partial = self.partial_tokens > 0 and params.policy_version is not None
        calls = [(lambda i=i: (self._pieces if partial else self._one)(
            prompts[i], n, params, seeds[i] if seeds is not None else None, model)) for i in range(len(prompts))]
        out = self.client.run(gather_all(calls))
        self.counters.generation_wall_s += time.perf_counter() - t0
        return out

    async def _pieces(self, prompt: Sequence[int], n: int, params: SamplingParams, seed: int | None,
                      model: str) -> list[Completion]:
        """Partial rollouts: the first piece of all n completions, then each one carried on."""
        first = await self._one(prompt, n, replace(params, max_tokens=min(self.partial_tokens, params.max_tokens)),
                                seed, model)
        return list(await asyncio.gather(*(self._carry_on(prompt, c, params, piece_seed(seed, i))
                                           for i, c in enumerate(first))))

    async def _carry_on(self, prompt: Sequence[int], c: Completion, params: SamplingParams,
                        seed: int | None) -> Completion:
        """`c` continued a piece at a time, each piece on the newest version loaded, until it
        stops or reaches `params.max_tokens`."""
        assert params.policy_version is not None
        version = params.policy_version
        ids, lps, versions, finish = list(c.token_ids), list(c.logprobs), [version] * len(c.token_ids), c.finish_reason
        while finish == "length" and 0 < len(ids) < params.max_tokens:
            version = max(version, self.newest)
            budget = min(self.partial_tokens, params.max_tokens - len(ids))
            part = (await self._one([*prompt, *ids], 1, replace(params, max_tokens=budget),
                                    piece_seed(seed, len(ids)), self.model_for(version)))[0]
            if not part.token_ids:
                break
            ids, lps = ids + part.token_ids, lps + part.logprobs
            versions += [version] * len(part.token_ids)
            finish = part.finish_reason
        return Completion(token_ids=ids, logprobs=lps, finish_reason=finish,
                          versions=versions if len(set(versions)) > 1 else None)

    async def _one(self, prompt: Sequence[int], n: int, params: SamplingParams, seed: int | None,
                   model: str) -> list[Completion]:
        body: dict[str, Any] = {"model": model, "max_tokens": params.max_tokens,
                                "temperature": params.temperature, "top_p": params.top_p, "n": n, "logprobs": 1}
        if params.top_k > 0:
            body["top_k"] = params.top_k
        if params.min_p > 0:
            body["min_p"] = params.min_p
        if seed is not None:
            body["seed"] = int(seed)
        if self.kind == "vllm":
            body["return_tokens_as_token_ids"] = True
        data = await self._complete(body, prompt)
        choices = sorted(data.get("choices", []), key=lambda c: int(c.get("index", 0)))
        if len(choices) != n:
            raise InferenceServerError(f"inference server {self.url} returned {len(choices)} choices for n = {n}")
        c = self.counters
        c.requests += 1
        c.prompt_tokens += len(prompt)
        out = []
        for choice in choices:
            got = recover(choice, encode=self.codec.encode, token_ids=self.codec.token_ids)
            c.recovered[got.source] += 1
            c.generated_tokens += len(got.completion.token_ids)
            out.append(got.completion)
        return out

    async def _complete(self, body: dict[str, Any], prompt: Sequence[int]) -> Any:
        if self.token_prompts:
            self.counters.token_prompt_calls += 1
            try:
                return await self.client.post_json("/v1/completions", {**body, "prompt": list(prompt)},
                                                   what="POST /v1/completions")
            except HTTPStatusError as exc:
                if exc.status not in (400, 422) or not self.token_prompts:
                    raise
                self.token_prompts = False
                self.counters.token_prompt_fallbacks += 1
        return await self.client.post_json("/v1/completions", {**body, "prompt": self.codec.prompt_text(prompt)},
                                           what="POST /v1/completions")

    # -- counters ----------------------------------------------------------------------------
    def metrics(self) -> dict[str, float | int | str]:
        """Counters since the previous call (one step)."""
        c, self.counters = self.counters, EngineCounters()
        out: dict[str, float | int | str] = {
            "engine_kind": self.kind,
            "engine_requests": c.requests,
            "engine_request_retries": self.client.take_retries(),
            "engine_token_prompt_calls": c.token_prompt_calls,
            "engine_token_prompt_fallbacks": c.token_prompt_fallbacks,
            "engine_token_native_prompt_enabled": int(self.token_prompts),
            "engine_prompt_tokens": c.prompt_tokens,
            "engine_generated_tokens": c.generated_tokens,
            "engine_generation_wall_s": round(c.generation_wall_s, 6),
            "engine_adapter_reload_calls": c.adapter_reload_calls,
            "engine_adapter_reload_s": round(c.adapter_reload_s, 6),
        }
        out.update({f"engine_token_recovery_{k}": v for k, v in c.recovered.items()})
        return out

    def close(self) -> None:
        self.client.close()


def piece_seed(seed: int | None, salt: int) -> int | None:
    """The seed of one piece of a partial rollout: a function of the request's and the piece."""
    if seed is None:
        return None
    return int.from_bytes(hashlib.blake2b(f"{seed}:{salt}".encode(), digest_size=4).digest(), "little") & 0x7FFFFFFF


def adapter_name_for(folder: str) -> str:
    """A name unique to a run's adapter folder, so runs sharing one server do not collide."""
    return "retrain-" + hashlib.sha256(folder.encode()).hexdigest()[:10]
