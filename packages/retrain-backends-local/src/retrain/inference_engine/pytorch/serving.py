"""The model side of `retrain serve`: one model, named LoRA adapters, and a worker thread that
decodes the requests that arrive together in one batch.

Requests queue up while a batch decodes; the worker then takes everything queued (after a
few milliseconds' window) and decodes it as one `decode` call per adapter, one row set per
request, so a request's draws depend only on its own seed, never on its neighbours.
Adapter loads and unloads run on the same thread between batches, in arrival order, so a
request sent after a load answered samples from the loaded weights.

Streaming and stop strings share one per-row text tracker: the text of a row is its ids
decoded without special tokens, cut before the first stop string; while a row runs, the
tail that could still grow into a stop string is held back from the stream.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from retrain.backends.serving import ServedRow, ServeError, ServeRequest
from retrain.inference_engine.pytorch.choice import Choice
from retrain.inference_engine.pytorch.sample import RowSet, SampleStats, decode
from retrain.models import multimodal


@dataclass
class Counters:
    requests: int = 0
    batches: int = 0
    rows: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    adapter_loads: int = 0
    adapter_unloads: int = 0
    busy_s: float = 0.0

    def as_dict(self) -> dict[str, float | int]:
        return dict(vars(self))


class _RowText:
    def __init__(self, decode_fn: Callable[[list[int]], str], stops: Sequence[str], include_stop: bool) -> None:
        self.decode, self.stops, self.include_stop = decode_fn, [s for s in stops if s], include_stop
        self.ids: list[int] = []
        self.sent = 0
        self.stopped = False
        self.text = ""

    def add(self, token: int, *, live: bool) -> bool:
        """Append a token; True when a stop string now ends the row. The text is decoded only
        when something reads it while the row runs (`live`: stop strings or a stream)."""
        self.ids.append(token)
        if not live:
            return False
        full = self.decode(self.ids)
        cut = min((i for i in (full.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            stop = next(s for s in self.stops if full.find(s) == cut)
            self.text, self.stopped = full[: cut + (len(stop) if self.include_stop else 0)], True
            return True
        self.text = full
        return False

    def delta(self, final: bool) -> str:
        visible = len(self.text)
        if not final and not self.stopped:
            visible -= max((k for s in self.stops for k in range(1, len(s)) if self.text.endswith(s[:k])), default=0)
        out = self.text[self.sent:visible] if visible > self.sent else ""
        self.sent = max(self.sent, visible)
        return out


class _Job:
    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.future: Future[Any] = Future()


class _Gen:
    def __init__(self, request: ServeRequest) -> None:
        self.request = request
        self.future: Future[list[ServedRow]] = Future()


class ServingEngine:
    """Owns the model and its worker thread; every public method is safe from any thread."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, model_name: str, device: torch.device,
                 seed: int = 0, autocast: torch.dtype | None = None, batch_window_s: float = 0.004) -> None:
        self.base = model
        self.model: Any = model
        self.hf = tokenizer.hf
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.device = device
        self.autocast = autocast
        self.eos_ids = list(tokenizer.eos_token_ids)
        self.pad_id = int(tokenizer.pad_token_id)
        self.vocab = int(getattr(model.config, "vocab_size", 0) or len(self.hf))
        self.max_context = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        self.generator = torch.Generator(device=device).manual_seed(seed + 1)
        self.adapters: dict[str, str] = {}
        self.counters = Counters()
        self.batch_window_s = batch_window_s
        self._queue: queue.Queue[_Job | _Gen | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="retrain-serve-model", daemon=True)
        self._thread.start()

    # -- public ------------------------------------------------------------------------------
    def submit(self, request: ServeRequest) -> Future[list[ServedRow]]:
        self._check(request)
        item = _Gen(request)
        self._queue.put(item)
        return item.future

    def load_adapter(self, name: str, path: str, *, inplace: bool = False) -> Future[Any]:
        return self._job(lambda: self._load(name, path, inplace))

    def unload_adapter(self, name: str) -> Future[Any]:
        return self._job(lambda: self._unload(name))

    def chat_prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        if not getattr(self.hf, "chat_template", None):
            raise ServeError("this model's tokenizer has no chat template; use /v1/completions", param="messages")
        try:
            ids = self.hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        except Exception as exc:  # the template's own error names what it could not render
            raise ServeError(f"the chat template cannot render these messages: {exc}", param="messages") from None
        return [int(i) for i in ids]

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.hf.encode(text, add_special_tokens=True)]

    def token_text(self, token: int) -> str:
        return str(self.hf.convert_ids_to_tokens(int(token)))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return str(self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    # -- checks (on the caller's thread, so a bad request never reaches the batch) ------------
    def _check(self, r: ServeRequest) -> None:
        if r.adapter is not None and r.adapter not in self.adapters:
            raise ServeError(f"the model {r.adapter!r} does not exist", status=404, param="model")
        for ids in r.prompts:
            if not ids:
                raise ServeError("the prompt is empty", param="prompt")
            bad = next((i for i in ids if not 0 <= i < self.vocab), None)
            if bad is not None:
                raise ServeError(f"token id {bad} is outside the vocabulary (0..{self.vocab - 1})", param="prompt")
            if self.max_context and len(ids) + r.params.max_tokens > self.max_context:
                raise ServeError(f"the prompt ({len(ids)} tokens) plus max_tokens ({r.params.max_tokens}) exceeds "
                                 f"the model's context of {self.max_context} tokens", param="max_tokens")

    # -- the worker thread -------------------------------------------------------------------
    def _job(self, fn: Callable[[], Any]) -> Future[Any]:
        job = _Job(fn)
        self._queue.put(job)
        return job.future

    def _work(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            time.sleep(self.batch_window_s)
            items: list[_Job | _Gen | None] = [first]
            with contextlib.suppress(queue.Empty):
                while True:
                    items.append(self._queue.get_nowait())
            batch: list[_Gen] = []
            for item in items:
                if isinstance(item, _Gen):
                    batch.append(item)
                    continue
                self._run(batch)
                batch = []
                if item is None:
                    return
                try:
                    item.future.set_result(item.fn())
                except Exception as exc:
                    item.future.set_exception(exc)
            self._run(batch)

    def _run(self, batch: list[_Gen]) -> None:
        by_adapter: dict[str | None, list[_Gen]] = {}
        for g in batch:
            by_adapter.setdefault(g.request.adapter, []).append(g)
        for adapter, gens in by_adapter.items():
            t0 = time.perf_counter()
            try:
                results = self._decode(adapter, [g.request for g in gens])
            except Exception as exc:
                for g in gens:
                    g.future.set_exception(exc)
            else:
                for g, rows in zip(gens, results, strict=True):
                    g.future.set_result(rows)
            self.counters.busy_s += time.perf_counter() - t0

    def _weights(self, adapter: str | None) -> contextlib.AbstractContextManager[Any]:
        if adapter is None:
            disable = getattr(self.model, "disable_adapter", None)
            return disable() if disable is not None and self.adapters else contextlib.nullcontext()
        self.model.set_adapter(adapter)
        return contextlib.nullcontext()

    def _decode(self, adapter: str | None, requests: list[ServeRequest]) -> list[list[ServedRow]]:
        row_sets = [RowSet(r.prompts, r.n, r.params,
                            torch.Generator(device=self.device).manual_seed(r.seed) if r.seed is not None
                            else self.generator, r.top_n) for r in requests]
        texts = [[_RowText(lambda ids, skip=r.skip_special_tokens: self.decode(ids, skip), r.stop, r.include_stop)
                  for _ in range(len(r.prompts) * r.n)] for r in requests]
        tops: list[list[list[list[tuple[int, float]]]]] = [[[] for _ in t] for t in texts]
        done = [[False] * len(t) for t in texts]
        offsets = [sum(len(t) for t in texts[:i]) for i in range(len(texts))]
        eos = set(self.eos_ids)
        step = [0]

        def observe(choices: list[Choice]) -> set[int]:
            stop: set[int] = set()
            for k, (r, c) in enumerate(zip(requests, choices, strict=True)):
                tokens, lps = c.token.tolist(), c.logprob.tolist()
                top_ids = c.top_ids.tolist() if c.top_ids is not None else None
                top_lps = c.top_logprobs.tolist() if c.top_logprobs is not None else None
                for row, token in enumerate(tokens):
                    if done[k][row]:
                        continue
                    alts = list(zip(top_ids[row], top_lps[row], strict=True)) if top_ids and top_lps else None
                    if alts is not None:
                        tops[k][row].append(alts)
                    hit = texts[k][row].add(token, live=bool(r.stop) or r.on_token is not None)
                    finished = hit or token in eos or step[0] + 1 >= r.params.max_tokens
                    if hit:
                        stop.add(offsets[k] + row)
                    done[k][row] = finished
                    if r.on_token is not None:
                        r.on_token((row, token, lps[row], alts, texts[k][row].delta(final=finished)))
            step[0] += 1
            return stop

        stats = SampleStats()
        autocast = (torch.autocast(device_type=self.device.type, dtype=self.autocast) if self.autocast is not None
                    else contextlib.nullcontext())
        with self._weights(adapter), autocast:
            completions = decode(self.model, row_sets, self.eos_ids, self.pad_id, stats=stats, observe=observe)
            scored = [[prompt_scores(self.model, ids, r.prompt_logprobs, self.device) for ids in r.prompts]
                      if r.prompt_logprobs is not None else None for r in requests]
        c = self.counters
        c.batches += 1
        c.requests += len(requests)
        c.rows += sum(len(t) for t in texts)
        c.prompt_tokens += stats.prompt_tokens
        c.generated_tokens += stats.generated_tokens
        out = []
        for k, r in enumerate(requests):
            rows = []
            for row, comp in enumerate(completions[k]):
                text = texts[k][row]
                if not (r.stop or r.on_token is not None):
                    text.text = text.decode(comp.token_ids)
                prompt_lps = scored[k]
                rows.append(ServedRow(token_ids=comp.token_ids, logprobs=comp.logprobs, finish_reason=comp.finish_reason,
                                      text=text.text, top=tops[k][row] if r.top_n else None,
                                      prompt_logprobs=prompt_lps[row // r.n] if prompt_lps is not None else None))
            out.append(rows)
        return out

    def _load(self, name: str, path: str, inplace: bool) -> str:
        from peft import PeftModel

        if name in self.adapters and not inplace:
            raise ServeError(f"the LoRA adapter {name!r} is already loaded (pass load_inplace to replace it)",
                             param="lora_name")
        folder = Path(path)
        if not (folder / "adapter_config.json").is_file():
            raise ServeError(f"{path} holds no LoRA adapter (adapter_config.json)", param="lora_path")
        try:
            if name in self.adapters:
                self.model.delete_adapter(name)
                del self.adapters[name]
            with multimodal.text_adapter(self.base, folder) as local:
                if isinstance(self.model, PeftModel):
                    self.model.load_adapter(str(local), adapter_name=name)
                else:
                    self.model = PeftModel.from_pretrained(self.base, str(local), adapter_name=name)
            self.model.to(self.device)
            self.model.eval()
        except Exception as exc:
            raise ServeError(f"cannot load the LoRA adapter at {path}: {exc}", param="lora_path") from None
        self.adapters[name] = str(folder)
        self.counters.adapter_loads += 1
        return name

    def _unload(self, name: str) -> str:
        if name not in self.adapters:
            raise ServeError(f"the LoRA adapter {name!r} cannot be found", status=404, param="lora_name")
        self.model.delete_adapter(name)
        del self.adapters[name]
        if not self.adapters:  # a PeftModel without adapters cannot run: back to the plain model
            self.model = self.model.unload()
        self.counters.adapter_unloads += 1
        return name


@torch.no_grad()
def prompt_scores(model: Any, ids: list[int], top: int, device: torch.device) -> list[dict[int, tuple[float, int]] | None]:
    """vLLM's prompt_logprobs of one prompt: None at position 0, then per position the prompt
    token's (logprob, rank) under the model at temperature 1 (rank 1 = the most likely) and
    the `top` most likely tokens'."""
    logits = model(input_ids=torch.tensor([ids], device=device), use_cache=False).logits[0, :-1].float()  # [L-1, V]
    lps = torch.log_softmax(logits, dim=-1)
    target = torch.tensor(ids[1:], device=device)
    own = lps.gather(-1, target[:, None]).squeeze(-1)  # [L-1]
    ranks = (lps > own[:, None]).sum(-1) + 1
    out: list[dict[int, tuple[float, int]] | None] = [None]
    best = lps.topk(top, dim=-1) if top > 0 else None
    for j in range(len(ids) - 1):
        entry = {ids[j + 1]: (float(own[j]), int(ranks[j]))}
        if best is not None:
            for rank, (v, i) in enumerate(zip(best.values[j].tolist(), best.indices[j].tolist(), strict=True), 1):
                entry.setdefault(int(i), (float(v), rank))
        out.append(entry)
    return out


def create(config: Any) -> ServingEngine:
    """The serving engine for a config: its model (seeded like training), device and dtype."""
    import os

    from retrain.backends.tokenizer import HFTokenizer
    from retrain.inference_engine.pytorch.device import autocast_dtype, plan_device
    from retrain.models.families import family_of, prepare_family
    from retrain.models.load import ModelSpec, load_model, load_tokenizer
    from retrain.models.tiny import from_tiny

    t = config.training
    seed = t.seed if t.seed >= 0 else int.from_bytes(os.urandom(4), "little")
    device = plan_device(config.backend.devices)
    spec = ModelSpec(config.model.model, config.model.revision, config.model.local_files_only,
                     bool(config.backend.options.get("trust_remote_code", False)))
    tokenizer = HFTokenizer(load_tokenizer(spec), reads_instructions=not from_tiny(spec.name))
    model = load_model(spec, seed=seed).to(device)
    model.eval()
    family = family_of(model.config)
    tokenizer.eos_token_ids = family.eos_token_ids(tokenizer.hf, model, tokenizer.eos_token_ids)
    prepare_family(family, model, config.backend.options)
    return ServingEngine(model, tokenizer, model_name=config.model.model, device=device, seed=seed,
                         autocast=autocast_dtype(device))
