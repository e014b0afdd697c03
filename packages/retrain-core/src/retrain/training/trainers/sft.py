"""`[training] trainer = "sft"`: supervised fine-tuning on `sft_data_path`, as an
orchestration path:

1. read the data and check its pins (before the model loads)    retrain.training.sft.data
2. start or resume the run directory, load the backend          retrain.training.rundir
3. tokenize the rows, plan the batches                          retrain.training.sft.order
4. one `backend.sft_step` per step, its row in metrics.jsonl    retrain.training.log
5. checkpoints every `save_every` steps, then the final weights and the manifest

Rows carry phase "sft" and count steps from 0 like warmup rows; the trainer state's
`sft_step` is the last completed step. Which rows a step trains on follows from
(order, seed, step) alone, and checkpoints hold weights, optimizer and RNG streams, so a run
killed at any point and resumed writes the same rows and the same final weights as an
uninterrupted one.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from retrain.backends.create import create_backend, require_runnable
from retrain.backends.protocol import TrainBackend
from retrain.config.folders import adapter_folder
from retrain.config.schema import TrainConfig
from retrain.io.layout import FINAL, checkpoint_name
from retrain.process.spans import Spans, span
from retrain.training import faults
from retrain.training.console import PlainReporter, Reporter
from retrain.training.export_command import export_command
from retrain.training.interrupt import StopRequest, resume_command
from retrain.training.log import RunLog
from retrain.training.meta import RunStatus
from retrain.training.result import RunResult
from retrain.training.rundir import running
from retrain.training.sft.audit import write_manifest, write_start
from retrain.training.sft.batches import SftBatches, schedule_state
from retrain.training.sft.data import load_sft_data
from retrain.training.sft.records import SftData
from retrain.training.state import TrainerState
from retrain.training.telemetry import backend_counters, peak_rss_mb
from retrain.training.warmup import warmup_lr


class SftTrainer:
    def __init__(self, config: TrainConfig, reporter: Reporter | None = None, *, config_path: str = "") -> None:
        self.config = config
        self.reporter = reporter or PlainReporter()
        self.config_path = config_path

    def run(self) -> RunResult:
        c = self.config
        started = time.perf_counter()
        require_runnable(c)
        data = load_sft_data(c)
        with contextlib.ExitStack() as cleanup:
            log = RunLog(c.logging.log_dir, log_generations=False)
            cleanup.callback(log.close)
            status = RunStatus(c, config_path=self.config_path, write=log.write_meta, sft_data=data.provenance())
            stop = cleanup.enter_context(StopRequest(self.reporter.message).installed())
            start = cleanup.enter_context(running(c, log, status))
            write_start(c, data, log.dir)
            log.open_trackers(c, condition="sft", warn=self.reporter.message)
            backend: TrainBackend = create_backend(c)
            cleanup.callback(backend.close)
            if start.checkpoint:
                backend.load_checkpoint(start.checkpoint)
            if start.note:
                self.reporter.message(start.note)
            summary = self._train(data, backend, log, start.state, stop)
            final = backend.save_adapter(str(adapter_folder(c) / FINAL))
            write_manifest(c, data, log.dir, Path(final), start.state.sft_schedule, summary)
            start.state.checkpoint_name, start.state.checkpoint_path = FINAL, final
            log.finish_state(start.state)
            summary.update({"elapsed_s": time.perf_counter() - started, "final_adapter": final,
                            "log_dir": c.logging.log_dir, "export_command": export_command(c)})
            status.succeeded(final, last_row=log.last_row)
            self.reporter.finish(summary)
            return RunResult(c.logging.log_dir, final, c.training.max_steps, summary)
        raise AssertionError("unreachable")  # ExitStack does not swallow exceptions

    def _train(self, data: SftData, backend: TrainBackend, log: RunLog, state: TrainerState,
               stop: StopRequest) -> dict[str, Any]:
        c, t = self.config, self.config.training
        state.phase = "sft"
        plan = schedule_state(c, state, len(data.rows))
        batches = SftBatches(c, data, backend.tokenizer, plan)
        schedule = batches.schedule
        lr, total = warmup_lr(c), t.max_steps
        self.reporter.start({"trainer": "sft", "model": c.model.model, "backend": c.backend.backend,
                             "steps": total, "rows": len(data.rows), "batch": plan.batch_size,
                             "epochs": round(schedule.epoch_of(total - 1), 3), "log_dir": c.logging.log_dir})
        if stop.requested:
            raise stop.interrupted("", f"nothing trained since {state.checkpoint_path or 'the start'}", self._hint())
        for step in range(state.sft_step + 1, total):
            with Spans().collect() as spans:
                batch = batches.step(step)
                with span("train"):
                    out = backend.sft_step(batch.datums, lr, t.weight_decay)
            elapsed = spans.elapsed()  # step_time_s and train_time_s are both the whole step, as ever
            tokens = batch.tokens
            row: dict[str, Any] = {
                "step": step, "phase": "sft", "loss": out.loss, "lr": lr, "epoch": round(schedule.epoch_of(step), 6),
                "datums": len(batch.datums), "supervised_tokens": out.tokens, **batch.metrics(),
                "step_time_s": round(elapsed, 6), "train_time_s": round(elapsed, 6),
                "tokens_per_second": round(tokens / elapsed, 3) if elapsed > 0 else 0.0,
                "supervised_tokens_per_second": round(out.tokens / elapsed, 3) if elapsed > 0 else 0.0,
                "process_max_rss_mb": peak_rss_mb(),
                **out.metrics, **backend_counters(backend),
            }
            row.update({k: v for k, v in spans.fields().items() if k not in row})
            log.record_warmup(row, step)
            log.last_row = row
            state.sft_step = step
            state.sft_losses.add(out.loss)
            self.reporter.sft(step, total, row)
            faults.crash_if("sft_after_step", step)
            due = t.save_every > 0 and (step + 1) % t.save_every == 0 and step + 1 < total
            if due or (stop.requested and step + 1 < total):
                path = adapter_folder(c) / checkpoint_name(step)
                saved = log.checkpoint(backend, None, state, path, step=step, phase="sft")
                if stop.requested:
                    raise stop.interrupted(f"SFT step {step}", f"checkpoint saved: {saved}", self._hint())
        summary: dict[str, Any] = {"condition": "sft", "steps": total, "unit": "SFT steps"}
        halves = state.sft_losses.halves()
        if halves is not None:
            n, first, last = halves
            summary.update({"window": n, "first_loss": first, "last_loss": last})
        elif state.sft_losses.mean() is not None:
            summary["mean_loss"] = state.sft_losses.mean()
        return summary

    def _hint(self) -> str:
        return f"resume with: {resume_command(self.config.logging.log_dir)}"


def run_sft(config: TrainConfig, reporter: Reporter | None = None, *, config_path: str = "") -> RunResult:
    """`[training] trainer = "sft"`: supervised fine-tuning on `sft_data_path`."""
    return SftTrainer(config, reporter, config_path=config_path).run()
