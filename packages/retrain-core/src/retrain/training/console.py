"""What a run tells its user while it trains: a `Reporter` receives events; the plain one here
prints lines, the CLI supplies a live progress bar."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Protocol, TextIO


class Reporter(Protocol):
    def start(self, info: Mapping[str, Any]) -> None: ...

    def warmup(self, step: int, total: int, row: Mapping[str, Any]) -> None: ...

    def step(self, step: int, total: int, row: Mapping[str, Any]) -> None: ...

    def sft(self, step: int, total: int, row: Mapping[str, Any]) -> None:
        """A step of `trainer = "sft"`."""
        ...

    def message(self, text: str) -> None: ...

    def finish(self, summary: Mapping[str, Any]) -> None: ...


def sft_line(step: int, total: int, row: Mapping[str, Any]) -> str:
    return (f"sft {step + 1}/{total} loss={row.get('loss', 0.0):.4f} epoch={row.get('epoch', 0.0):.2f} "
            f"tok/s={row.get('tokens_per_second', 0.0):.0f} time={row.get('step_time_s', 0.0):.2f}s")


def step_line(step: int, row: Mapping[str, Any]) -> str:
    return (f"step {step} [{row.get('condition', '')}] loss={row.get('loss', 0.0):.4f} "
            f"reward={row.get('mean_reward', 0.0):.3f} correct={100 * row.get('correct_rate', 0.0):.1f}% "
            f"datums={row.get('num_datums', 0)} tok/s={row.get('tokens_per_second', 0.0):.0f} "
            f"time={row.get('step_time_s', 0.0):.2f}s{dynamic_sampling(row)}{reward_failures(row)}")


def dynamic_sampling(row: Mapping[str, Any]) -> str:
    """` dropped=D/G rounds=+R` (and ` fill=F` when the batch stayed short) with dynamic
    sampling, else ""."""
    if "dynamic/groups_sampled" not in row:
        return ""
    fill = float(row.get("dynamic/batch_fill", 1.0))
    return (f" dropped={int(row['dynamic/groups_dropped'])}/{int(row['dynamic/groups_sampled'])} "
            f"rounds=+{int(row.get('dynamic/extra_rounds', 0))}" + (f" fill={fill:.2f}" if fill < 1 else ""))


def reward_failures(row: Mapping[str, Any]) -> str:
    """` reward_errors=F/N` when some of the step's completions failed to score, else ""."""
    failed = int(row.get("reward_errors", 0) + row.get("reward_timeouts", 0))
    groups = row.get("dynamic/groups_sampled", row.get("batch_size", 0))
    total = int(groups) * int(row.get("group_size", 0))
    return f" reward_errors={failed}/{total}" if failed else ""


def counted(n: int, unit: str = "RL steps") -> str:
    """`n` of a plural `unit`, singular for one: "3 RL steps", "1 RL step"."""
    return f"{n} {unit[:-1] if n == 1 else unit}"


def _window(n: int, unit: str) -> str:
    """The steps a summary window covers: "10 RL steps", or "RL step" for one."""
    return unit[:-1] if n == 1 else f"{n} {unit}"


def _eval_metrics(row: Mapping[str, Any]) -> str:
    k = row.get("eval/k", 1)
    keys = ["eval/pass@1", *([f"eval/pass@{k}", f"eval/maj@{k}"] if k != 1 else [])]
    return " ".join(f"{key[5:]}={row[key]:.3f}" for key in keys if key in row)


def eval_line(row: Mapping[str, Any]) -> str:
    """One evaluation (an eval.jsonl row) as a console line."""
    failed = int(row.get("eval/reward_errors", 0))
    problems = int(row.get("eval/examples", 0))
    samples = problems * int(row.get("eval/n", row.get("eval/k", 1)))
    return (f"eval after {counted(int(row.get('step', 0)))}: {_eval_metrics(row)} "
            f"reward={row.get('eval/mean_reward', 0.0):.3f} ({counted(problems, 'held-out problems')}, "
            f"{row.get('eval/wall_s', 0.0):.1f}s)" + (f" reward_errors={failed}/{samples}" if failed else ""))


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    # an RL run that made no update is complete, not trained (retrain.training.idle)
    head = "Run complete, nothing trained" if summary.get("updates") == 0 else "Training complete"
    lines = [f"{head}: {summary.get('condition', '')}, "
             f"{counted(int(summary.get('steps', 0)), summary.get('unit', 'RL steps'))} "
             f"in {summary.get('elapsed_s', 0.0):.1f}s"]
    if summary.get("untrained"):
        lines.append(f"  warning: {summary['untrained']}")
        lines.append(f"  what gives a group rewards that differ: {summary.get('untrained_remedy', '')}")
    if summary.get("window") and "first_loss" in summary:
        steps = _window(summary["window"], "steps")
        lines.append(f"  mean loss, first {steps}: {summary['first_loss']:.4f}")
        lines.append(f"  mean loss, last {steps}:  {summary['last_loss']:.4f}")
    if "mean_loss" in summary:
        lines.append(f"  mean loss over the run: {summary['mean_loss']:.4f}")
    if "first_reward" in summary:
        steps = _window(summary["window"], "RL steps")
        lines.append(f"  mean reward, first {steps}: {summary['first_reward']:.3f}")
        lines.append(f"  mean reward, last {steps}:  {summary['last_reward']:.3f}"
                     f"  ({summary['last_reward'] - summary['first_reward']:+.3f})")
    elif "mean_reward" in summary:
        lines.append(f"  mean reward over the run: {summary['mean_reward']:.3f}")
    if ds := summary.get("dynamic_sampling"):
        share = ds["dropped"] / ds["groups"] if ds["groups"] else 0.0
        lines.append(f"  dynamic sampling: {ds['dropped']} of {ds['groups']} groups dropped ({share:.1%}), "
                     f"{ds['extra_rounds']} extra rounds, {ds['surplus']} surplus groups, "
                     f"{ds['short_steps']} steps short of a full batch")
    if long := summary.get("dropped_long_prompts"):
        lines.append(f"  prompts dropped for max_prompt_tokens: {long}")
    first, last = summary.get("eval_first"), summary.get("eval_last")
    if first and last:
        problems = counted(int(last.get("eval/examples", 0)), "problems")
        lines.append(f"  held-out ({problems}), after {counted(first['step'])}: {_eval_metrics(first)}")
        if last is not first and last.get("step") != first.get("step"):
            gain = last["eval/pass@1"] - first["eval/pass@1"]
            lines.append(f"  held-out ({problems}), after {counted(last['step'])}: {_eval_metrics(last)}"
                         f"  (pass@1 {gain:+.3f})")
        lines.append(f"  evaluation time: {summary.get('eval_s', 0.0):.1f}s (not in the step times)")
    for key in ("final_adapter", "log_dir"):
        if summary.get(key):
            lines.append(f"  {key.replace('_', ' ')}: {summary[key]}")
    if summary.get("export_command"):
        lines.append(f"  export it: {summary['export_command']}  (docs/export.md: --format gguf, adapter)")
    return lines


class PlainReporter:
    def __init__(self, stream: TextIO | None = None, every: int = 10) -> None:
        self.stream = stream or sys.stderr
        self.every = max(1, every)

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def start(self, info: Mapping[str, Any]) -> None:
        self._print("retrain: " + ", ".join(f"{k}={v}" for k, v in info.items()))

    def warmup(self, step: int, total: int, row: Mapping[str, Any]) -> None:
        if step % self.every == 0 or step == total - 1:
            self._print(f"warmup {step + 1}/{total} loss={row.get('loss', 0.0):.4f}")

    def step(self, step: int, total: int, row: Mapping[str, Any]) -> None:
        if step % self.every == 0 or step == total - 1:
            self._print(step_line(step, row))

    def sft(self, step: int, total: int, row: Mapping[str, Any]) -> None:
        if step % self.every == 0 or step == total - 1:
            self._print(sft_line(step, total, row))

    def message(self, text: str) -> None:
        self._print(text)

    def finish(self, summary: Mapping[str, Any]) -> None:
        for line in summary_lines(summary):
            self._print(line)


class SilentReporter:
    """Reports nothing: the console of a rank other than 0 (rank 0 reports for the run) and of
    runs driven by another program (a campaign's runs)."""

    def start(self, info: Mapping[str, Any]) -> None: ...

    def warmup(self, step: int, total: int, row: Mapping[str, Any]) -> None: ...

    def step(self, step: int, total: int, row: Mapping[str, Any]) -> None: ...

    def sft(self, step: int, total: int, row: Mapping[str, Any]) -> None: ...

    def message(self, text: str) -> None: ...

    def finish(self, summary: Mapping[str, Any]) -> None: ...
