"""What `retrain status` reports: one summary per run, one per campaign (its condition x seed
matrix), and the report that holds them. `retrain.status.scan` fills them in; the table, the
JSON output and the Prometheus exporter read them.
"""

from __future__ import annotations

import statistics

import msgspec

STATES = ("running", "stale", "pending", "dead", "interrupted", "failed", "finished")
ENDED = frozenset({"finished", "failed", "interrupted"})


class RunSummary(msgspec.Struct, kw_only=True):
    run: str
    path: str
    state: str
    condition: str | None = None
    seed: int | None = None
    phase: str | None = None
    step: int | None = None
    max_steps: int | None = None
    correct_rate: float | None = None
    loss: float | None = None
    mean_reward: float | None = None
    #: the rows' step times summed (status.scan._wall_time): the steps' own time, not the run's
    #: (model loading, evaluation and checkpoints are left out); shown as `time_in_steps=`
    wall_time_s: float | None = None
    wall_time_estimated: bool = False
    completed: bool = False
    failed: bool = False
    stale: bool = False
    pid: int | None = None
    alive: bool | None = None
    trainer: str | None = None
    failure: str | None = None
    #: the run trained nothing, or almost nothing, and why (retrain.training.idle)
    warning: str | None = None
    resume_mode: str | None = None
    resume_warning: str | None = None
    latest_step_time_s: float | None = None
    tokens_per_second: float | None = None
    #: the training half of the step: the rows' tokens per second of the update, and on CUDA its
    #: model FLOPs utilisation (backends that report them: the local backend)
    train_tokens_per_s: float | None = None
    mfu: float | None = None
    sample_share: float | None = None
    train_share: float | None = None
    train_time_semantics: str | None = None
    train_submit_enqueue_time_s: float | None = None
    train_submit_enqueue_share: float | None = None
    process_max_rss_mb: float | None = None
    #: on-policy distillation ([teacher]): the latest step's mean per-token KL to the teacher
    #: (`teacher/kl`) and the seconds the teacher's scoring took (`teacher/time_s`)
    teacher_kl: float | None = None
    teacher_time_s: float | None = None
    last_update: float | None = None
    age_s: float | None = None
    #: the latest held-out evaluation (eval.jsonl): after how many RL steps, with k samples
    eval_step: int | None = None
    eval_k: int | None = None
    eval_pass_at_1: float | None = None
    eval_pass_at_k: float | None = None
    eval_mean_reward: float | None = None

    @property
    def steps_done(self) -> int | None:
        return None if self.step is None else self.step + 1


#: What a matrix cell holds: held-out pass@1, or the last RL step's mean reward.
PASS_AT_1, REWARD = "eval/pass@1", "mean_reward"


class CellStats(msgspec.Struct, kw_only=True):
    """Mean and sample std (0 for one run) of a condition's cells over its `n` finished runs."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: list[float]) -> CellStats | None:
        if not values:
            return None
        return cls(mean=statistics.fmean(values), std=statistics.stdev(values) if len(values) > 1 else 0.0,
                   n=len(values))


class CampaignSummary(msgspec.Struct, kw_only=True):
    run: str
    path: str
    status: str
    conditions: list[str]
    seeds: list[int]
    max_steps: int | None
    num_runs: int
    completed: int
    failed: int
    counts: dict[str, int]
    runs: list[RunSummary]
    #: condition -> seed -> the run's `matrix_metric` (None: no value yet)
    matrix: dict[str, dict[str, float | None]]
    matrix_metric: str = REWARD
    matrix_stats: dict[str, CellStats | None] = msgspec.field(default_factory=dict)
    campaign_toml: str | None = None
    timestamp: str | None = None
    runner_pid: int | None = None
    runner_alive: bool | None = None
    last_activity: float | None = None
    error: str | None = None


class StatusReport(msgspec.Struct, kw_only=True):
    root: str
    generated_at: float
    runs: list[RunSummary]
    campaigns: list[CampaignSummary]

    def all_runs(self) -> list[RunSummary]:
        return [r for c in self.campaigns for r in c.runs] + self.runs
