"""The Tinker backend: a LoRA adapter trained and sampled on the Tinker service.

Calls per RL step (spec backends.md §3): `save_weights_for_sampler` + `create_sampling_client`
(publish the trained weights; skipped when nothing trained since), one `sample` per prompt
(all submitted before the first is awaited), then `forward_backward` and `optim_step`
submitted back to back and awaited together. With `[training] max_async_level = 1` the next
step's samples are drawn while this step's update runs on the service.

Checkpoints are local folders holding `tinker_checkpoint.json`: the service paths of the
training state (`save_state`: weights and Adam moments) and of the sampler weights, the run's
seed (sampling seeds derive from it and the batch) and the base model. Resume creates a
fresh training client and calls `load_state_with_optimizer`; the service must still hold
the state (`resume_runtime_dependent`).
"""

from __future__ import annotations

import json
import os
import uuid
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retrain.backends.errors import BackendUnavailable
from retrain.backends.seeds import request_seeds
from retrain.backends.tinker import adapter
from retrain.backends.tinker.loss import (
    Evaluated,
    TinkerDatum,
    action_masks,
    evaluate,
    rl_datums,
    sdk_datums,
    service_loss,
    sft_datums,
)
from retrain.backends.tinker.record import CHECKPOINT
from retrain.backends.tinker.remote import Remote
from retrain.backends.tinker.runtime import (
    TinkerError,
    load_tinker,
    sdk_version,
    served_models,
    service,
)
from retrain.backends.tinker.throttle import Throttle
from retrain.backends.tokenizer import HFTokenizer
from retrain.config.schema import TrainConfig
from retrain.config.sft_loss import effective_sft_loss
from retrain.errors import UserError
from retrain.io.atomic import write_dir_atomic
from retrain.types import Completion, Datum, SamplingParams, TrainOutput


class TinkerBackend:
    def __init__(self, config: TrainConfig) -> None:
        t, opts = config.training, config.backend.options
        self.sdk = load_tinker()
        self.types = self.sdk.types
        self.service = service(config)
        self.remote = Remote(self.sdk, self.service, Throttle(config.backend.throttle_dir, config.backend.max_concurrent),
                             timeout_s=float(opts.get("call_timeout_s", 600.0)), retries=int(opts.get("max_retries", 3)),
                             backoff_s=float(opts.get("retry_backoff_s", 2.0)))
        self.base_model, self.rank = config.model.model, config.model.lora_rank
        self.seed = t.seed if t.seed >= 0 else int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
        self.run_tag = uuid.uuid4().hex[:8]  # checkpoint names are unique per training run on the service
        self.loss_fn, self.loss_config = service_loss(t.policy_loss_mode, t.clip_eps, t.clip_eps_high)
        self.sft_loss = effective_sft_loss(config)
        self.aggregation, self.max_tokens = t.loss_aggregation, t.max_tokens
        o = config.optimizer
        self.adam = {"beta1": o.beta1, "beta2": o.beta2, "eps": o.eps, "grad_clip_norm": o.grad_clip_norm}
        self._check_serves()  # before the SDK's clients, which retry an unreachable service for minutes
        self.client = self.sdk.ServiceClient(base_url=self.service.url or None, api_key=self.service.key.value,
                                             user_metadata={"created_by": "retrain"})
        self.training = self.remote.call("create_lora_training_client", lambda: self.client.create_lora_training_client(
            base_model=self.base_model, rank=self.rank, seed=self.seed, train_mlp=bool(opts.get("train_mlp", True)),
            train_attn=bool(opts.get("train_attn", True)), train_unembed=bool(opts.get("train_unembed", True))))
        self.tokenizer = HFTokenizer(self.training.get_tokenizer())
        self.sampler: Any = None
        self.sampler_path = ""
        self.stale = True  # trained since the sampler's weights were saved
        self.updates = 0  # optimizer steps taken by this process
        self.eval_sampler: Any = None
        self.eval_version = -1  # `updates` when eval_sampler's weights were saved

    def _check_serves(self) -> None:
        """Fail fast, in one line, when the service is unreachable or lacks the base model."""
        served = served_models(self.sdk, self.service, timeout_s=min(self.remote.timeout_s, 60.0))
        if served and self.base_model not in served:
            raise BackendUnavailable(f"the Tinker service at {self.service.where} does not serve "
                                     f"[model] model = {self.base_model!r}; it serves: {', '.join(served)}")

    def _name(self, label: str) -> str:
        return f"{label}-{self.run_tag}-{uuid.uuid4().hex[:6]}"

    # sampling ---------------------------------------------------------------------------
    def checkpoint(self, name: str) -> None:
        """Publish the trained weights to a new sampling client when they changed."""
        if self.sampler is not None and not self.stale:
            return
        saved = self.remote.call("save_weights_for_sampler",
                                 lambda: self.training.save_weights_for_sampler(self._name(name)))
        self._use_sampler(saved.path)
        self.stale = False

    def _use_sampler(self, path: str) -> None:
        self.sampler = self.remote.call("create_sampling_client", lambda: self.training.create_sampling_client(path))
        self.sampler_path = path

    def sample(self, prompts: Sequence[Sequence[int]], num_samples: int,
               params: SamplingParams) -> list[list[Completion]]:
        """Request seeds derive from the run's seed and `params.batch_id`, or from
        `params.seed` for a seeded (evaluation) call, whose remote calls are left out of the
        step's timings."""
        if params.want_entropy:
            raise RuntimeError("the Tinker service returns no token entropies (want_entropy)")
        if params.min_p > 0:
            raise RuntimeError("the Tinker sampler has no min_p")
        if params.seed is None:
            if self.sampler is None:
                self.checkpoint("initial")
            return self._sample(self.sampler, prompts, num_samples, params, params.batch_id)
        with self.remote.unrecorded():
            return self._sample(self._latest_sampler(), prompts, num_samples, params, params.seed)

    def _latest_sampler(self) -> Any:
        """A sampler of the latest trained weights for a seeded call. The training sampler
        is left as it is: with max_async_level = 1 a batch sampled concurrently must keep
        the weights its policy version names."""
        if self.sampler is not None and not self.stale:
            return self.sampler
        if self.eval_sampler is None or self.eval_version != self.updates:
            saved = self.remote.call("save_weights_for_sampler",
                                     lambda: self.training.save_weights_for_sampler(self._name("eval")))
            self.eval_sampler = self.remote.call("create_sampling_client",
                                                 lambda: self.training.create_sampling_client(saved.path))
            self.eval_version = self.updates
        return self.eval_sampler

    def _sample(self, sampler: Any, prompts: Sequence[Sequence[int]], num_samples: int, params: SamplingParams,
                batch: int | None) -> list[list[Completion]]:
        drawn = request_seeds(self.seed, batch, len(prompts))
        seeds: list[int | None] = list(drawn) if drawn is not None else [None] * len(prompts)

        def submit(ids: Sequence[int], seed: int | None) -> Any:
            sp = self.types.SamplingParams(max_tokens=params.max_tokens, temperature=params.temperature,
                                           top_p=params.top_p, top_k=params.top_k or -1, seed=seed)
            return sampler.sample(prompt=self.types.ModelInput.from_ints(list(ids)), num_samples=num_samples,
                                  sampling_params=sp)

        pending = [submit(ids, seed) for ids, seed in zip(prompts, seeds, strict=True)]
        out = []
        for ids, seed, future in zip(prompts, seeds, pending, strict=True):
            try:
                result = self.remote.wait("sample", future)
            except TinkerError:
                result = self.remote.call("sample", lambda ids=ids, seed=seed: submit(ids, seed))
            out.append([Completion(token_ids=[int(x) for x in s.tokens], logprobs=[float(x) for x in s.logprobs or []],
                                   finish_reason="stop" if str(s.stop_reason) == "stop" else "length")
                        for s in result.sequences])
        return out

    # training ---------------------------------------------------------------------------
    def _update(self, loss_fn: str, datums: list[TinkerDatum], config: Mapping[str, float] | None, lr: float,
                weight_decay: float) -> Evaluated:
        """forward_backward and optim_step submitted back to back; the loss of the weights
        before the update, evaluated with Tinker's formula from the returned logprobs."""
        data = sdk_datums(self.types, datums)
        fb = self.training.forward_backward(data, loss_fn, dict(config) if config else None)
        step = self.training.optim_step(self.types.AdamParams(learning_rate=lr, weight_decay=weight_decay, **self.adam))
        result = self.remote.wait("forward_backward", fb)
        self.remote.wait("optim_step", step)
        self.stale = True
        self.updates += 1
        logprobs = [np.asarray(o["logprobs"].tolist(), dtype=np.float64) for o in result.loss_fn_outputs]
        return evaluate(loss_fn, datums, logprobs, dict(config) if config else None)

    def train_step(self, datums: Sequence[Datum], lr: float, weight_decay: float) -> TrainOutput:
        """One update on the policy loss, aggregated as configured (folded into the
        advantages, loss.py)."""
        tokens = sum(int(m.sum()) for m in action_masks(datums))
        if tokens == 0:
            return TrainOutput(loss=0.0, tokens=0)
        folded = rl_datums(datums, self.aggregation, self.max_tokens)
        ev = self._update(self.loss_fn, folded, self.loss_config, lr, weight_decay)
        return TrainOutput(loss=ev.loss, tokens=tokens,
                           metrics={"clip_fraction": ev.clip_fraction, "policy/abs_kl": ev.abs_kl})

    def sft_step(self, datums: Sequence[Datum], lr: float, weight_decay: float) -> TrainOutput:
        folded = sft_datums(datums, self.sft_loss)
        tokens = sum(int(d.mask.sum()) for d in folded)
        if tokens == 0:
            return TrainOutput(loss=0.0, tokens=0)
        ev = self._update(self.sft_loss, folded, None, lr, weight_decay)
        return TrainOutput(loss=ev.loss, tokens=tokens)

    # state ------------------------------------------------------------------------------
    def save_checkpoint(self, path: str) -> str:
        state = self.remote.call("save_state", lambda: self.training.save_state(self._name(Path(path).name)))
        record = {"state_path": state.path, "sampler_path": self.sampler_path, "sampler_stale": self.stale,
                  "base_model": self.base_model, "lora_rank": self.rank, "seed": self.seed,
                  "service": self.service.where, "sdk": sdk_version()}

        def fill(tmp: Path) -> None:
            (tmp / CHECKPOINT).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")

        return str(write_dir_atomic(path, fill))

    def _record(self, path: str | Path) -> dict[str, Any]:
        record = read_checkpoint(path)
        for key, mine in (("base_model", self.base_model), ("lora_rank", self.rank)):
            if record.get(key) != mine:
                raise TinkerError(f"checkpoint {path} was trained with {key} = {record.get(key)!r}; "
                                  f"this run has {mine!r}")
        return record

    def _load_state(self, state_path: str, *, optimizer: bool) -> None:
        kind = "load_state_with_optimizer" if optimizer else "load_state"
        with warnings.catch_warnings():
            # deprecated in SDK 0.38 for create_training_client_from_state[_with_optimizer],
            # which servers without model creation on load (skyrl-tx) refuse; both restore the
            # same state into a training client
            warnings.simplefilter("ignore", FutureWarning)
            self.remote.call(kind, lambda: getattr(self.training, kind)(state_path))

    def load_checkpoint(self, path: str) -> None:
        record = self._record(path)
        self.updates += 1
        self._load_state(record["state_path"], optimizer=True)
        self.seed = int(record["seed"])
        if record.get("sampler_path"):
            self._use_sampler(record["sampler_path"])
            self.stale = bool(record.get("sampler_stale", True))

    def load_adapter(self, path: str) -> None:
        """Sample from saved weights (`retrain eval`): a checkpoint folder's sampler weights
        (its training state's when they were stale), or the service weights a downloaded
        adapter came from. The training client's optimizer state is left as it is."""
        folder = Path(path)
        self.updates += 1
        if (folder / CHECKPOINT).is_file():
            record = self._record(folder)
            if record.get("sampler_path") and not record.get("sampler_stale", True):
                self._use_sampler(record["sampler_path"])
            else:
                self._load_state(record["state_path"], optimizer=False)
                self.stale = True
                self.checkpoint(folder.name)
            self.stale = False
            return
        source = folder / adapter.SOURCE
        if not source.is_file():
            raise UserError(f"{path} holds neither {CHECKPOINT} nor {adapter.SOURCE}: evaluating an adapter that "
                            "was not trained on the Tinker service (uploading it) is not built yet",
                            hint="pass a checkpoint or final folder of a run with backend = \"tinker\"")
        self._use_sampler(json.loads(source.read_text())["tinker_path"])
        self.stale = False

    def save_adapter(self, path: str) -> str:
        """The final sampler weights, downloaded into `path` as a peft adapter folder."""
        saved = self.remote.call("save_weights_for_sampler",
                                 lambda: self.training.save_weights_for_sampler(self._name(Path(path).name)))
        folder = adapter.download(self.service, saved.path, path, base_model=self.base_model, rank=self.rank,
                                  timeout_s=self.remote.timeout_s)
        return str(folder)

    def runtime_metrics(self) -> dict[str, float | int | str]:
        return {**self.remote.metrics(), "tinker/lora_rank": self.rank}

    def close(self) -> None:
        """End the session; a service that is already gone is not an error here."""
        try:
            self.client.close("success").result(timeout=10)
        except Exception:
            pass


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    file = Path(path) / CHECKPOINT
    try:
        record: dict[str, Any] = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise TinkerError(f"{file} is not a Tinker checkpoint record: {exc}") from None
    if not str(record.get("state_path", "")).startswith("tinker://"):
        raise TinkerError(f"{file} names no tinker:// training state")
    return record
