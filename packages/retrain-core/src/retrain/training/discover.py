"""TTT-Discover: test-time training on one problem (`trainer = "ttt_discover"`, spec
algorithms.md §13). It is the RL trainer with another step:

1. select `batch_size` start states from the archive by PUCT (retrain.training.discovery.archive)
   and count each selection on the entry and its ancestors;
2. prompt each with the problem plus the discovery memory (retrain.training.discovery.prompt);
3. sample `group_size` completions per start, score them, add each as a child of its start;
4. prune the archive to its size limit;
5. advantages through the configured pipeline (typically algorithm_mode = "discover_entropic",
   whose β search logs `discover_beta`), uniform groups skipped, then `train_step`.

The problem is the data source's first example; the rest are ignored. Resume is not supported
(the archive is not checkpointed; config validation refuses `--resume`); the final archive is
written to `discover_archive.json` in the log directory.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from retrain.config.schema import TrainConfig
from retrain.io.atomic import write_json_atomic
from retrain.rollout.group import StepRollouts
from retrain.training.console import Reporter
from retrain.training.discovery.archive import Archive
from retrain.training.discovery.prompt import DiscoverParams, memory_prompt
from retrain.training.result import RunResult
from retrain.training.rollouts import advantages, collect, train_on
from retrain.training.telemetry import StepTimes, backend_counters, step_row
from retrain.training.trainer import Run, Trainer
from retrain.types import Example

ARCHIVE_FILE = "discover_archive.json"


class DiscoverTrainer(Trainer):
    def _rl(self, run: Run) -> None:
        c, t = self.config, self.config.training
        examples = run.cursor.examples
        problem = examples[0]
        if len(examples) > 1:
            self.reporter.message(f"ttt_discover trains on the first problem only; {len(examples) - 1} more ignored")
        params = DiscoverParams.of(c.algorithm.params)
        root_reward = run.flow.reward.score_batch([""], [problem.reference]).scores[0]
        archive = Archive(root_reward)
        batch_size, group_size = run.sizes
        limit = params.max_entries(batch_size, group_size)
        tokenizer = run.backend.tokenizer
        for step in range(t.max_steps):
            t0 = time.perf_counter()
            starts = archive.select(batch_size, params.puct_c)
            for start in starts:
                archive.record_selection(start)
            start_depths = [archive.entries[s].depth for s in starts]
            batch = []
            for start in starts:
                text = memory_prompt(problem.prompt, archive, start, params)
                batch.append((Example(prompt=text, reference=problem.reference, task=problem.task,
                                      info=problem.info, example_id=problem.example_id), tokenizer.encode_prompt(text)))
            run.backend.checkpoint(f"step_{step}")
            rollouts = collect(run.backend, run.flow, batch, group_size=group_size)
            rollouts.policy_version = step
            for start, group in zip(starts, rollouts.groups, strict=True):
                for text, reward in zip(group.texts, group.rewards.tolist(), strict=True):
                    archive.add(start, text, reward, step)
            archive.prune(limit)
            adv = advantages(run.flow, rollouts, run.backend, step=t.sft_warmup_steps + step,
                             adv_clip_max=t.adv_clip_max)
            out, train_s = train_on(run.backend, adv, t.lr, t.weight_decay)
            run.state.count(adv.correct, adv.total)
            times = StepTimes(time.perf_counter() - t0, rollouts.sample_time_s, train_s)
            row = step_row(c, step=step, condition=run.flow.condition, caps=run.caps, rollouts=rollouts, adv=adv,
                           out=out, running_correct_rate=run.state.running_correct_rate, sizes=run.sizes,
                           times=times, runtime=backend_counters(run.backend), backpressure={})
            row.update({k: v for k, v in _step_metrics(archive, start_depths, rollouts).items() if k not in row})
            run.log.record_step(row, rollouts, step, correct=adv.correct, total=adv.total)
            run.state.rl_step_done(step, run.cursor.index, run.sizes, row["mean_reward"])
            self.reporter.step(step, t.max_steps, row)
            self._maybe_checkpoint(run, step)
        write_json_atomic(Path(c.logging.log_dir) / ARCHIVE_FILE, archive.to_dict(), indent=1)


def _step_metrics(archive: Archive, start_depths: list[int], rollouts: StepRollouts) -> dict[str, float]:
    rewards = rollouts.rewards
    return {**archive.metrics(), "discover_start_depth_mean": float(np.mean(start_depths)),
            "discover_step_reward_max": float(rewards.max()) if rewards.size else 0.0}


def run_discover(config: TrainConfig, reporter: Reporter | None = None, *, config_path: str = "") -> RunResult:
    """`[training] trainer = "ttt_discover"`: test-time training with the discovery archive."""
    return DiscoverTrainer(config, reporter, config_path=config_path).run()
