"""The RL training run, as an orchestration path only:

1. build the flow (pipeline, reward, controllers)      retrain.training.flow
2. load data and backend                               retrain.data, retrain.backends.create
3. sample and score rollouts                           retrain.training.producer (step.collect)
4. build train datums                                  retrain.training.step.advantages
5. train                                               backend.train_step
6. record state and logs                               retrain.training.record (rows: telemetry)
   and, when due, evaluate on held-out problems         retrain.evaluation
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from retrain.backends.create import capabilities, create_backend, require_runnable
from retrain.backends.protocol import LeaderSampler, TrainBackend
from retrain.config.folders import adapter_folder
from retrain.config.schema import TrainConfig
from retrain.config.sft_loss import effective_sft_loss
from retrain.data.chat import PromptEncoder
from retrain.data.source import load_examples, notes_of
from retrain.errors import UserError
from retrain.evaluation.evaluate import evaluate
from retrain.evaluation.problems import encode_held_out, load_problems
from retrain.evaluation.settings import EvalPlan
from retrain.io.layout import FINAL, checkpoint_name
from retrain.process.spans import Spans, span
from retrain.process.world import World, current_world
from retrain.teacher.create import build_teacher
from retrain.training import faults
from retrain.training.console import PlainReporter, Reporter, SilentReporter, eval_line
from retrain.training.dapo.dynamic import DynamicSampling
from retrain.training.export_command import export_command
from retrain.training.flow import Flow, build_flow
from retrain.training.follower import FollowerLog
from retrain.training.interrupt import StopRequest, resume_command
from retrain.training.log import RunLog
from retrain.training.meta import RunStatus
from retrain.training.producer import RolloutProducer
from retrain.training.prompts import PromptCursor
from retrain.training.record import TrainedStep, record_step
from retrain.training.result import RunResult
from retrain.training.resume import resume_contract
from retrain.training.reward_faults import RewardFaults
from retrain.training.run import HeldOut, Run
from retrain.training.rundir import Start, running
from retrain.training.sft.batches import SftBatches, schedule_state
from retrain.training.sft.data import load_sft_data
from retrain.training.sft.records import SftData, sft_cap
from retrain.training.step import advantages, train_on
from retrain.training.telemetry import WarmupRow, backend_counters
from retrain.training.warmup import WarmupData, warmup_batch_size, warmup_lr
from retrain.validation.data import check_data_files
from retrain.validation.runtime import several_processes
from retrain.validation.trace import trace


class FlowError(UserError, RuntimeError):
    """The preflight trace found the configured algorithm unusable on this backend."""


class Trainer:
    def __init__(self, config: TrainConfig, reporter: Reporter | None = None, *, config_path: str = "") -> None:
        self.config = config
        self.world: World = current_world()
        # ranks other than 0 train in lockstep and stay silent: rank 0 reports for the run
        self.reporter = (reporter or PlainReporter()) if self.world.leader else SilentReporter()
        self.config_path = config_path

    def run(self) -> RunResult:
        c = self.config
        started = time.perf_counter()
        # before anything is built or written: a bad pin or audit fails the run at once, and
        # run_meta.json records the data's provenance from its first write
        sft_data = load_sft_data(c) if c.training.sft_warmup_steps and c.training.sft_data_path else None
        check_data_files(c)  # a table that cannot be read, or a key naming no column, fails here
        flow = self._flow()
        with contextlib.ExitStack() as cleanup:
            cleanup.callback(flow.close)
            log = RunLog(c.logging.log_dir, log_generations=c.logging.log_generations,
                         generations_per_prompt=c.logging.generation_log_samples_per_prompt,
                         warmup_steps=c.training.sft_warmup_steps) if self.world.leader else FollowerLog(
                c.logging.log_dir, warmup_steps=c.training.sft_warmup_steps)
            cleanup.callback(log.close)
            status = RunStatus(c, config_path=self.config_path, world_size=self.world.size, write=log.write_meta,
                               sft_data=sft_data.provenance() if sft_data is not None else None)
            # from before the model loads: a scheduler's SIGTERM then is a stop, not a kill
            self.stop = cleanup.enter_context(
                StopRequest(self.reporter.message, distributed=self.world.distributed).installed())
            start = cleanup.enter_context(running(c, log, status))
            run = self._open(flow, log, start, cleanup, sft_data)
            self._share = run.backend.broadcast if self.world.distributed and isinstance(
                run.backend, LeaderSampler) else None
            self._stop_before_start(run)
            if run.state.phase == "sft":
                self._warmup(run)
            self._rl(run)
            return self._finish(run, status, started)
        raise AssertionError("unreachable")  # ExitStack does not swallow exceptions

    # -- setup / cleanup -------------------------------------------------------------------
    def _flow(self) -> Flow:
        c = self.config
        require_runnable(c)
        for refused in several_processes(c, self.world.size, torchrun=True) if self.world.distributed else ():
            raise FlowError(f"{refused.key}: {refused.message}", hint=refused.hint)
        report = trace(c)
        if (why := report.refusal()) is not None:
            raise FlowError(why)
        for issue in report.issues:
            self.reporter.message(f"flow warning [{issue.category}]: {issue.message}")
        return build_flow(c, reward_dir=c.logging.log_dir if self.world.leader else None)

    def _open(self, flow: Flow, log: RunLog, start: Start, cleanup: contextlib.ExitStack,
              sft_data: SftData | None) -> Run:
        c, state = self.config, start.state
        caps = capabilities(c)
        state.resume_mode, state.resume_warning = resume_contract(caps)
        log.open_trackers(c, condition=flow.condition, warn=self.reporter.message)
        env = flow.environment
        examples = list(env.examples()) if env is not None else load_examples(c)
        plan = EvalPlan.of(c)
        held_out_examples = load_problems(c) if plan.schedule.enabled else None  # fails before the model loads
        for note in (*notes_of(examples), *(notes_of(held_out_examples) if held_out_examples is not None else ())):
            self.reporter.message(note)
        backend: TrainBackend = create_backend(c)
        cleanup.callback(backend.close)
        if start.checkpoint:
            backend.load_checkpoint(start.checkpoint)
            flow.sepa.load_state(state.sepa)
            flow.backpressure.load_state(state.backpressure)
            if env is not None:
                env.load_state(state.environment)
        if env is not None:
            env.open(backend)
        if start.note:
            self.reporter.message(start.note)
        self.reporter.start({"condition": flow.condition, "model": c.model.model, "backend": c.backend.backend,
                             "steps": c.training.max_steps, "warmup": c.training.sft_warmup_steps,
                             "log_dir": c.logging.log_dir})
        cursor = PromptCursor(examples, backend.tokenizer, start=state.example_idx,
                              encode=env.encode if env is not None else PromptEncoder.of(c),
                              max_prompt_tokens=c.data.max_prompt_tokens, note=self.reporter.message)
        sizes = (state.current_batch_size or c.training.batch_size, state.current_group_size or c.training.group_size)
        t = c.training
        teacher = build_teacher(c, backend)  # checks its tokenizer against the student's before any step
        if teacher is not None:
            cleanup.callback(teacher.close)
            self.reporter.message(f"distilling from the teacher {teacher.name} (kl_coef {c.teacher.kl_coef:g}, "
                                  f"reward_coef {c.teacher.reward_coef:g})")
        producer = RolloutProducer(backend, flow, cursor, level=t.max_async_level, max_steps=t.max_steps,
                                   dynamic=DynamicSampling.of(c), versions=t.async_versions,
                                   max_off_policy_steps=t.max_off_policy_steps, world=self.world, teacher=teacher)
        cleanup.callback(producer.close)
        held_out = None
        if held_out_examples is not None:
            held_out = HeldOut(plan, encode_held_out(c, held_out_examples, backend.tokenizer, self.reporter.message))
        r = c.reward
        faults = RewardFaults(c.logging.log_dir if self.world.leader else None, r.max_error_share, r.max_error_steps,
                              self.reporter.message)
        return Run(flow, log, state, backend, cursor, caps, sizes, producer, held_out, sft_data, faults)

    def _finish(self, run: Run, status: RunStatus, started: float) -> RunResult:
        c, state = self.config, run.state
        final = run.backend.save_adapter(str(adapter_folder(c) / FINAL))
        state.checkpoint_name, state.checkpoint_path = FINAL, final
        run.log.finish_state(state)
        window = state.rewards
        summary: dict[str, Any] = {"condition": run.flow.condition, "steps": window.steps,
                                   "elapsed_s": time.perf_counter() - started, "final_adapter": final,
                                   "log_dir": c.logging.log_dir, "export_command": export_command(c)}
        evals = run.log.eval_rows()
        if evals:
            summary.update({"eval_first": evals[0], "eval_last": evals[-1],
                            "eval_s": sum(float(r.get("eval/wall_s", 0.0)) for r in evals)})
        halves = window.halves()
        if halves is not None:
            n, first, last = halves
            summary.update({"window": n, "first_reward": first, "last_reward": last})
        elif window.mean() is not None:
            summary["mean_reward"] = window.mean()
        if c.training.dynamic_sampling:
            summary["dynamic_sampling"] = state.dynamic_sampling.summary()
        summary["updates"] = state.idle.trained
        if run.cursor.dropped_long:
            summary["dropped_long_prompts"] = len(run.cursor.dropped_long)
        if verdict := state.idle.verdict():
            summary.update({"untrained": verdict, "untrained_remedy": state.idle.remedy()})
        status.succeeded(final, last_row=run.log.last_row)
        self.reporter.finish(summary)
        return RunResult(c.logging.log_dir, final, state.step + 1, summary)

    # -- phases ----------------------------------------------------------------------------
    def _warmup(self, run: Run) -> None:
        c, state = self.config, run.state
        total = c.training.sft_warmup_steps
        data = WarmupData(run.backend.tokenizer, sft_cap(c))
        size, lr = warmup_batch_size(c), warmup_lr(c)
        batches = None
        if effective_sft_loss(c) == "importance_sampling" and state.sft_step == -1:
            self.reporter.message("warmup loss (sft_loss_fn = importance_sampling): minus the mean probability of "
                                  "the target tokens, between -1 and 0 and falling as the model learns; "
                                  "sft_loss_fn = \"cross_entropy\" reports the negative log-likelihood")
        if run.sft_data is not None:  # rows of sft_data_path instead of the [data] prompts
            plan = schedule_state(c, state, len(run.sft_data.rows))
            batches = SftBatches(c, run.sft_data, run.backend.tokenizer, plan)
        for step in range(state.sft_step + 1, total):
            with Spans().collect() as spans:
                extra: dict[str, int] = {}
                if batches is not None:
                    batch = batches.step(step)
                    datums, extra = batch.datums, batch.metrics()
                else:
                    datums = [data.datum(ex, ids) for ex, ids in run.cursor.take(size)]
                with span("train"):
                    out = run.backend.sft_step(datums, lr, c.training.weight_decay)
            elapsed = round(spans.elapsed(), 6)  # the whole step, as train_time_s has always been for warmup rows
            row = WarmupRow(step=step, loss=out.loss, lr=lr, datums=len(datums), supervised_tokens=out.tokens,
                            step_time_s=elapsed, train_time_s=elapsed).to_dict(backend_counters(run.backend),
                                                                               {**extra, "world_size": self.world.size},
                                                                               spans.fields())
            run.log.record_warmup(row, step)
            state.sft_step, state.example_idx = step, run.cursor.index
            self.reporter.warmup(step, total, row)
            faults.crash_if("warmup_after_step", step)
            self._maybe_checkpoint(run, step, "warmup")
            self._stop_if_asked(run, step, "warmup")
        state.phase = "rl"

    def _rl(self, run: Run) -> None:
        t = self.config.training
        if run.state.step == -1:
            self._evaluate(run, 0)
        for step in range(run.state.step + 1, t.max_steps):
            with Spans().collect() as spans:
                rollouts = run.producer.next(step, run.sizes)
                # SEPA and the advantage pipeline count steps globally, warmup steps included
                adv = advantages(run.flow, rollouts, run.backend, step=t.sft_warmup_steps + step,
                                 adv_clip_max=t.adv_clip_max, tl_grpo=t.tl_grpo)
                if self.config.optimizer_batch.capture:
                    out, captured = self._captured_step(run, adv)
                else:
                    out, captured = train_on(run.backend, adv, t.lr, t.weight_decay), {}
            self._step_done(run, TrainedStep(step, spans, rollouts, adv, out, run.producer.committed_index, captured))

    def _step_done(self, run: Run, trained: TrainedStep) -> None:
        """Record the step (retrain.training.record), then: evaluate when due, the fault point,
        the scheduled checkpoint, the stop when the reward error budget is spent, an interrupt."""
        step = trained.step
        recorded = record_step(self.config, run, trained, self.reporter, world_size=self.world.size)
        self._evaluate(run, step + 1)
        faults.crash_if("after_step", step)
        self._maybe_checkpoint(run, step)
        if recorded.over_budget:
            assert run.faults is not None
            saved = self._checkpoint_unless_saved(run, step)
            raise run.faults.budget_error(recorded.failed, int(trained.rollouts.rewards.size), saved,
                                          self._resume_hint())
        if recorded.never_scored:
            assert run.faults is not None
            raise run.faults.never_scored_error(run.state.idle, self._checkpoint_unless_saved(run, step))
        self._stop_if_asked(run, step)

    def _captured_step(self, run: Run, adv: Any) -> tuple[Any, dict[str, str]]:
        """The step's update, with its exact inputs and outputs captured
        (retrain.training.optimizer_batch.artifact); validation allows it on step 0 only."""
        from retrain.training.optimizer_batch.artifact import Capture

        t = self.config.training
        if not adv.informative:
            raise RuntimeError("optimizer-batch capture: the step has no token with a non-zero advantage "
                               "(every group tied), so there is no update to capture; change the seed")
        capture = Capture(self.config.logging.log_dir, run.backend)
        try:
            out = train_on(run.backend, adv, t.lr, t.weight_decay)
            assert out is not None
            pins = capture.finish(self.config, adv.datums, t.lr, t.weight_decay, out.loss)
        except BaseException:
            capture.abandon()
            raise
        self.reporter.message(f"captured the optimizer batch: {pins['manifest']}\n"
                              f"  expected_manifest_sha256 = \"{pins['manifest_sha256']}\"\n"
                              f"  expected_logical_sha256 = \"{pins['logical_sha256']}\"")
        return out, {f"optimizer_batch/{k}": v for k, v in pins.items()}

    def _evaluate(self, run: Run, done: int) -> None:
        """Evaluate the policy after `done` RL steps when the schedule says so. It runs after
        the step's row is recorded (its time is not in the step's) and before the step's
        checkpoint (which therefore covers it), from evaluation's own random stream."""
        held = run.held_out
        if held is None or not held.plan.schedule.due(done, self.config.training.max_steps):
            return
        p = held.plan
        result = evaluate(run.backend, held.problems, run.flow.reward, p.k, params=p.params,
                          pass_threshold=p.pass_threshold, step=done, per_call=p.per_call, n=p.n)
        self.reporter.message(eval_line(run.log.record_eval(result)))
        if run.faults is not None:
            run.faults.announce(result.faults, f"eval after {done} RL steps")

    def _maybe_checkpoint(self, run: Run, step: int, phase: str = "") -> None:
        if self._due(step):
            self._checkpoint(run, step, phase)

    def _due(self, step: int) -> bool:
        every = self.config.training.save_every
        return every > 0 and (step + 1) % every == 0

    def _checkpoint(self, run: Run, step: int, phase: str = "") -> str:
        path = adapter_folder(self.config) / checkpoint_name(step, phase)
        return run.log.checkpoint(run.backend, run.producer.checkpoint_flow(run.flow), run.state, path, step=step,
                                  phase=phase)

    def _checkpoint_unless_saved(self, run: Run, step: int, phase: str = "") -> str:
        """The checkpoint of the step just done: the scheduled one, or one saved now."""
        return run.state.checkpoint_path if self._due(step) else self._checkpoint(run, step, phase)

    def _stop_if_asked(self, run: Run, step: int, phase: str = "") -> None:
        """After a step and its checkpoint: a stop asked for (retrain.training.interrupt), the
        run stops here, saved. Every rank calls it after every step (`agreed` is a collective)."""
        if not self.stop.agreed(self._share):
            return
        saved = self._checkpoint_unless_saved(run, step, phase)
        where = f"warmup step {step}" if phase == "warmup" else f"step {step}"
        raise self.stop.interrupted(where, f"checkpoint saved: {saved}", self._resume_hint())

    def _stop_before_start(self, run: Run) -> None:
        """A stop asked while the run loaded: nothing was trained since its latest checkpoint,
        so it stops without saving one."""
        if self.stop.agreed(self._share):
            latest = run.state.checkpoint_path
            raise self.stop.interrupted("", f"nothing trained since {latest or 'the start'}", self._resume_hint())

    def _resume_hint(self) -> str:
        return f"resume with: {resume_command(self.config.logging.log_dir)}"


def run_rl(config: TrainConfig, reporter: Reporter | None = None, *, config_path: str = "") -> RunResult:
    """`[training] trainer = "retrain"`: the RL loop."""
    return Trainer(config, reporter, config_path=config_path).run()
