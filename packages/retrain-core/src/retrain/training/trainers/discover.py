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
written to `discover_archive.json` in the log directory, also when the run stops early.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from retrain.config.schema import TrainConfig
from retrain.io.atomic import write_json_atomic
from retrain.io.layout import DISCOVER_ARCHIVE
from retrain.process.spans import Spans, span
from retrain.rollout.group import StepRollouts
from retrain.training.console import Reporter
from retrain.training.discovery.archive import Archive
from retrain.training.discovery.prompt import DiscoverParams, memory_prompt
from retrain.training.record import TrainedStep
from retrain.training.result import RunResult
from retrain.training.run import Run
from retrain.training.step import advantages, collect, train_on
from retrain.training.trainers.rl import Trainer
from retrain.types import Example


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
        try:
            for step in range(t.max_steps):
                with Spans().collect() as spans:
                    self._step(run, spans, step, problem, archive, params, limit)
        finally:  # a run stopped early (an interrupt, the reward error budget) keeps its archive too
            write_json_atomic(Path(c.logging.log_dir) / DISCOVER_ARCHIVE, archive.to_dict(), indent=1)

    def _step(self, run: Run, spans: Spans, step: int, problem: Example, archive: Archive, params: DiscoverParams,
              limit: int) -> None:
        """Steps 1 to 5 of one RL step, then its record (Trainer._step_done)."""
        t, tokenizer = self.config.training, run.backend.tokenizer
        batch_size, group_size = run.sizes
        starts = archive.select(batch_size, params.puct_c)
        for start in starts:
            archive.record_selection(start)
        start_depths = [archive.entries[s].depth for s in starts]
        batch = []
        for start in starts:
            text = memory_prompt(problem.prompt, archive, start, params)
            batch.append((Example(prompt=text, reference=problem.reference, task=problem.task,
                                  info=problem.info, example_id=problem.example_id), tokenizer.encode_prompt(text)))
        with span("sync"):
            run.backend.checkpoint(f"step_{step}")
        rollouts = collect(run.backend, run.flow, batch, group_size=group_size)
        rollouts.policy_version = step
        for start, group in zip(starts, rollouts.groups, strict=True):
            for text, reward in zip(group.texts, group.rewards.tolist(), strict=True):
                archive.add(start, text, reward, step)
        archive.prune(limit)
        adv = advantages(run.flow, rollouts, run.backend, step=t.sft_warmup_steps + step,
                         adv_clip_max=t.adv_clip_max)
        out = train_on(run.backend, adv, t.lr, t.weight_decay)
        extra = _step_metrics(archive, start_depths, rollouts)
        self._step_done(run, TrainedStep(step, spans, rollouts, adv, out, run.cursor.index, extra))

    def _resume_hint(self) -> str:
        archive = Path(self.config.logging.log_dir) / DISCOVER_ARCHIVE
        return f"a TTT-Discover run cannot resume (its archive is not checkpointed); the archive so far: {archive}"


def _step_metrics(archive: Archive, start_depths: list[int], rollouts: StepRollouts) -> dict[str, float]:
    rewards = rollouts.rewards
    return {**archive.metrics(), "discover_start_depth_mean": float(np.mean(start_depths)),
            "discover_step_reward_max": float(rewards.max()) if rewards.size else 0.0}


def run_discover(config: TrainConfig, reporter: Reporter | None = None, *, config_path: str = "") -> RunResult:
    """`[training] trainer = "ttt_discover"`: test-time training with the discovery archive."""
    return DiscoverTrainer(config, reporter, config_path=config_path).run()
