"""The RL training run, as an orchestration path only:

1. build the flow (pipeline, reward, controllers)      retrain.training.flow
2. load data and backend                               retrain.data, retrain.backends.create
3. sample and score rollouts                           retrain.training.rollouts.collect
4. build train datums                                  retrain.training.rollouts.advantages
5. train                                               backend.train_step
6. record state and logs                               retrain.training.log / state / telemetry
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrain.backends.create import capabilities, create_backend, require_runnable
from retrain.backends.protocol import TrainBackend
from retrain.config.schema import TrainConfig
from retrain.data.source import load_examples
from retrain.errors import UserError
from retrain.io.log import read_jsonl
from retrain.training import faults
from retrain.training.backpressure import StepObservation
from retrain.training.console import PlainReporter, Reporter
from retrain.training.flow import Flow, build_flow
from retrain.training.log import METRICS, RunLog
from retrain.training.meta import run_meta
from retrain.training.preflight import trace
from retrain.training.prompts import PromptCursor
from retrain.training.resume import resume_contract
from retrain.training.rollouts import advantages, collect, nonzero_action_tokens
from retrain.training.rundir import prepare
from retrain.training.state import TrainerState, write_state
from retrain.training.telemetry import StepRow, WarmupRow, generation_rows, steps_row, timing_fields
from retrain.training.wandb import WandbSink, create_wandb_sink
from retrain.training.warmup import WarmupData, warmup_batch_size, warmup_lr

SUMMARY_WINDOW = 10


class FlowError(UserError, RuntimeError):
    """The preflight trace found the configured algorithm unusable on this backend."""


@dataclass
class RunResult:
    log_dir: str
    final_adapter: str
    steps: int
    summary: dict[str, Any] = field(default_factory=dict)


class Trainer:
    def __init__(self, config: TrainConfig, reporter: Reporter | None = None, *, config_path: str = "") -> None:
        self.config = config
        self.reporter = reporter or PlainReporter()
        self.config_path = config_path
        self.wandb: WandbSink | None = None

    def run(self) -> RunResult:
        c = self.config
        started = time.perf_counter()
        require_runnable(c)
        report = trace(c)
        if not report.ok:
            raise FlowError("training flow validation failed: " + "; ".join(
                i.message for i in report.issues if i.severity == "error"))
        flow = build_flow(c)
        log = RunLog(c.logging.log_dir, log_generations=c.logging.log_generations)
        start = prepare(c, log)
        state = start.state
        self.caps = capabilities(c)
        mode, warning = resume_contract(self.caps)
        state.resume_mode, state.resume_warning = mode, warning
        log.write_pid()
        log.write_meta(run_meta(c, status="running", config_path=self.config_path))
        backend: TrainBackend | None = None
        try:
            self.wandb = create_wandb_sink(c, condition=flow.condition)
            examples = load_examples(c)
            backend = create_backend(c)
            if start.checkpoint:
                backend.load_checkpoint(start.checkpoint)
                flow.sepa.load_state_dict(state.sepa)
                flow.backpressure.load_state_dict(state.backpressure)
            if start.note:
                self.reporter.message(start.note)
            for issue in report.issues:
                self.reporter.message(f"flow warning [{issue.category}]: {issue.message}")
            self.reporter.start({"condition": flow.condition, "model": c.model.model, "backend": c.backend.backend,
                                 "steps": c.training.max_steps, "warmup": c.training.sft_warmup_steps,
                                 "log_dir": c.logging.log_dir})
            cursor = PromptCursor(examples, backend.tokenizer, start=state.example_idx)
            if state.phase == "sft":
                self._warmup(backend, flow, cursor, state, log)
            self._rl(backend, flow, cursor, state, log)
            final = backend.save_adapter(str(Path(c.backend.adapter_path) / "final"))
            state.checkpoint_name, state.checkpoint_path = "final", final
            write_state(c.logging.log_dir, state)
            summary = self._summary(flow, started, final)
            log.write_meta(run_meta(c, status="succeeded", config_path=self.config_path, policy_ref=final,
                                    last_row=summary.pop("last_row", None)))
            self.reporter.finish(summary)
            return RunResult(c.logging.log_dir, final, state.step + 1, summary)
        except BaseException as exc:
            if self.wandb is not None:
                self.wandb.finish(exit_code=1)
                self.wandb = None
            log.write_meta(run_meta(c, status="failed", config_path=self.config_path,
                                    failure=f"exception:{type(exc).__name__}", error=str(exc)))
            raise
        finally:
            if self.wandb is not None:
                self.wandb.finish()
            log.close()
            log.clear_pid()
            flow.close()
            if backend is not None:
                backend.close()

    # -- phases ----------------------------------------------------------------------------
    def _warmup(self, backend: TrainBackend, flow: Flow, cursor: PromptCursor, state: TrainerState,
                log: RunLog) -> None:
        c = self.config
        total = c.training.sft_warmup_steps
        data = WarmupData(backend.tokenizer)
        size, lr = warmup_batch_size(c), warmup_lr(c)
        for step in range(state.sft_step + 1, total):
            t0 = time.perf_counter()
            datums = [data.datum(ex, ids) for ex, ids in cursor.take(size)]
            out = backend.sft_step(datums, lr, c.training.weight_decay)
            elapsed = time.perf_counter() - t0
            row = WarmupRow(step=step, loss=out.loss, lr=lr, datums=len(datums), supervised_tokens=out.tokens,
                            step_time_s=round(elapsed, 6), train_time_s=round(elapsed, 6)
                            ).to_dict(runtime_metrics(backend))
            log.log_metrics(row)
            if self.wandb is not None:
                self.wandb.log_step(row, step)
            state.sft_step, state.example_idx = step, cursor.index
            self.reporter.warmup(step, total, row)
            faults.crash_if("warmup_after_step", step)
            if self._due(step):
                self._checkpoint(backend, flow, state, log, f"warmup_step_{step + 1}", step, "warmup_")
        state.phase = "rl"

    def _rl(self, backend: TrainBackend, flow: Flow, cursor: PromptCursor, state: TrainerState, log: RunLog) -> None:
        c, t = self.config, self.config.training
        caps = self.caps
        bs = state.current_batch_size or t.batch_size
        gs = state.current_group_size or t.group_size
        for step in range(state.step + 1, t.max_steps):
            t0 = time.perf_counter()
            sepa_lambda = flow.sepa.resolve_lambda(step) if flow.pipeline.uses_sepa_controller else 0.0
            backend.checkpoint(f"step_{step}")
            batch = cursor.take(bs)
            rollouts = collect(backend, flow, batch, group_size=gs, max_tokens=t.max_tokens,
                               temperature=t.temperature, top_p=t.top_p)
            adv = advantages(flow, rollouts, backend, step=step, sepa_lambda=sepa_lambda,
                             adv_clip_max=t.adv_clip_max, tl_grpo=t.tl_grpo)
            informative = nonzero_action_tokens(adv.datums)
            t1 = time.perf_counter()
            out = backend.train_step(adv.datums, t.lr, t.weight_decay) if informative else None
            train_time = time.perf_counter() - t1
            state.total_correct += adv.correct
            state.total_completions += adv.total
            # every sampled sequence (prompt + completion), trained on or not
            tokens = sum(len(g.prompt_ids) * len(g.completions) for g in rollouts.groups) + rollouts.completion_tokens
            step_time = time.perf_counter() - t0
            fixed = StepRow(
                step=step, condition=flow.condition, algorithm_mode=c.algorithm.algorithm_mode,
                advantage_mode=c.algorithm.advantage_mode, transform_mode=c.algorithm.transform_mode,
                uncertainty_kind=c.algorithm.uncertainty_kind, policy_loss_mode=t.policy_loss_mode,
                loss=out.loss if out else 0.0, reported_loss=out.loss if out else 0.0,
                loss_is_placeholder=not caps.reports_sync_loss, backend_reports_sync_loss=caps.reports_sync_loss,
                backend_preserves_token_advantages=caps.preserves_token_advantages,
                mean_reward=float(rollouts.rewards.mean()) if adv.total else 0.0,
                correct_rate=adv.correct / adv.total if adv.total else 0.0,
                running_correct_rate=state.total_correct / max(state.total_completions, 1),
                num_datums=len(adv.datums), batch_size=bs, group_size=gs,
                max_token_hit_rate=rollouts.length_hits / max(adv.total, 1),
                mean_completion_tokens=rollouts.completion_tokens / max(adv.total, 1),
                tokens_per_step=tokens, skipped=out is None, completion_tokens=rollouts.completion_tokens,
                nonzero_action_tokens=informative)
            row = fixed.to_dict(flow.sepa.metrics(step), adv.metrics, rollouts.reward_metrics,
                                out.metrics if out else {},
                                timing_fields(step_time, rollouts.sample_time_s, train_time, tokens))
            row.update(runtime_metrics(backend))
            flow.backpressure.observe(StepObservation(bs, gs, tokens, step_time, skipped=out is None))
            rec = flow.backpressure.recommend()
            if c.backpressure.enabled:
                row.update(rec.metrics())
                bs, gs = rec.batch_size, rec.group_size
            log.log_metrics(row)
            if self.wandb is not None:  # W&B steps are global: warmup steps come first
                self.wandb.log_step(row, t.sft_warmup_steps + step)
            log.steps.log(steps_row(row, adv.correct, adv.total))
            for g in rollouts.groups:
                log.generations.log_many(generation_rows(
                    step, g.example.prompt, g.texts, g.rewards.tolist(), [len(x.token_ids) for x in g.completions],
                    c.logging.generation_log_samples_per_prompt))
            state.step, state.example_idx = step, cursor.index
            state.current_batch_size, state.current_group_size = bs, gs
            self.reporter.step(step, t.max_steps, row)
            faults.crash_if("after_step", step)
            if self._due(step):
                self._checkpoint(backend, flow, state, log, f"checkpoint_step_{step + 1}", step)

    # -- helpers ---------------------------------------------------------------------------
    def _due(self, step: int) -> bool:
        every = self.config.training.save_every
        return every > 0 and (step + 1) % every == 0

    def _checkpoint(self, backend: TrainBackend, flow: Flow, state: TrainerState, log: RunLog, name: str,
                    step: int, phase: str = "") -> None:
        c = self.config
        log.sync()
        path = backend.save_checkpoint(str(Path(c.backend.adapter_path) / name))
        faults.crash_if(phase + "mid_checkpoint", step)
        state.checkpoint_name, state.checkpoint_path = name, path
        state.sepa = flow.sepa.state_dict()
        state.backpressure = flow.backpressure.state_dict()
        write_state(path, state)  # the checkpoint is self-describing (step, data cursor, controllers)
        write_state(c.logging.log_dir, state)
        faults.crash_if(phase + "after_checkpoint", step)

    def _summary(self, flow: Flow, started: float, final: str) -> dict[str, Any]:
        rows = [r for r in read_jsonl(Path(self.config.logging.log_dir) / METRICS) if r.get("phase", "rl") != "sft"]
        rewards = [float(r.get("mean_reward", 0.0)) for r in rows]
        summary: dict[str, Any] = {"condition": flow.condition, "steps": len(rows),
                                   "elapsed_s": time.perf_counter() - started, "final_adapter": final,
                                   "log_dir": self.config.logging.log_dir, "last_row": rows[-1] if rows else None}
        window = min(SUMMARY_WINDOW, len(rewards))
        if window:
            summary.update({"window": window, "first_reward": sum(rewards[:window]) / window,
                            "last_reward": sum(rewards[-window:]) / window})
        return summary


def runtime_metrics(backend: TrainBackend) -> dict[str, Any]:
    """The backend's counters for the step just done (every step reads them, so none leak
    into the next step's row)."""
    read = getattr(backend, "runtime_metrics", None)
    if not callable(read):
        return {}
    return {k: v for k, v in read().items() if isinstance(k, str) and isinstance(v, int | float | str)}


def train(config: TrainConfig, reporter: Reporter | None = None, *, config_path: str = "") -> RunResult:
    return Trainer(config, reporter, config_path=config_path).run()
