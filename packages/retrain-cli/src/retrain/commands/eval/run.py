"""`retrain eval CONFIG [--adapter DIR | --run LOG_DIR [--all-checkpoints]] [--k N] [--n N]
[--max-examples N] [--json]`: held-out pass@k (from n >= k samples per problem) of the base
model, an adapter, or a run's checkpoints, with the config's model, backend, sampling settings,
reward and problems.

One backend is built and each policy's weights are loaded into it in turn; every policy is
scored on the same problems from the same random stream (`retrain.evaluation.settings`).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

from retrain.backends.create import create_backend, require_runnable
from retrain.backends.protocol import AdapterLoader
from retrain.commands.eval.policies import Policy, select
from retrain.data.source import notes_of
from retrain.errors import UserError
from retrain.evaluation.evaluate import Evaluation, evaluate
from retrain.evaluation.problems import encode_held_out, load_problems
from retrain.evaluation.settings import EvalPlan
from retrain.validation.load import load_config

Progress = Callable[[int], None]


def run(config: str, *, adapter: str | None = None, run_dir: str | None = None, all_checkpoints: bool = False,
        k: int | None = None, n: int | None = None, max_examples: int | None = None, as_json: bool = False) -> None:
    policies = select(adapter, run_dir, all_checkpoints)
    if not policies:
        raise UserError(f"--run {run_dir}: no checkpoint_step_N or final folder beside its latest checkpoint")
    c = load_config(config).config
    try:
        plan = EvalPlan.of(c, k=k, n=n)
    except ValueError as exc:
        shown = " ".join(f"{flag} {v}" for flag, v in (("--k", k), ("--n", n)) if v) or f"[eval] n = {c.eval.n}"
        raise UserError(f"{shown}: {exc}", hint="--n N with N >= k") from None
    examples = load_problems(c, max_examples=max_examples)
    for note in notes_of(examples):  # what loading the problems dropped, and why
        print(f"retrain: {note}", file=sys.stderr)
    require_runnable(c)
    from retrain.rewards.create import build_reward

    results: list[tuple[Policy, Evaluation]] = []
    with contextlib.ExitStack() as stack:
        reward = build_reward(c)
        stack.callback(reward.close)
        backend = create_backend(c)
        stack.callback(backend.close)
        if any(p.path for p in policies) and not isinstance(backend, AdapterLoader):
            raise UserError(f"backend {c.backend.backend!r} cannot load saved weights for evaluation")
        problems = encode_held_out(c, examples, backend.tokenizer,
                                   lambda note: print(f"retrain: {note}", file=sys.stderr))
        for policy, progress in _progress(policies, len(problems)):
            if policy.path is not None:
                backend.load_adapter(policy.path)
            results.append((policy, evaluate(backend, problems, reward, plan.k, params=plan.params,
                                             pass_threshold=plan.pass_threshold, step=policy.rl_steps or 0,
                                             per_call=plan.per_call, progress=progress, n=plan.n)))
    if as_json:
        print(json.dumps(as_rows(results), indent=2))
    else:
        _table(results, plan.k, plan.n, len(examples))
    for policy, result in results:
        for fault in result.faults:  # a reward that cannot score reads as a policy that scores 0
            print(f"retrain: the reward failed on {result.row.reward_errors} of {len(problems) * plan.n} samples "
                  f"of {policy.label} (they scored 0): {fault.line()}", file=sys.stderr)


def as_rows(results: list[tuple[Policy, Evaluation]]) -> list[dict[str, Any]]:
    """One object per policy: its label, path and RL steps, then the row's metrics without
    the `eval/` prefix (`pass@1`, `pass@8`, `maj@8`, `mean_reward`, ...)."""
    out = []
    for policy, result in results:
        metrics = {key.removeprefix("eval/"): v for key, v in result.row.to_dict().items() if key != "step"}
        out.append({"policy": policy.label, "path": policy.path, "rl_steps": policy.rl_steps, **metrics})
    return out


@contextlib.contextmanager
def _bar(label: str, total: int) -> Iterator[Progress]:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done: bar.update(task, completed=done)


def _progress(policies: list[Policy], total: int) -> Iterator[tuple[Policy, Progress | None]]:
    """Each policy with a progress callback: a bar on a terminal, one line per policy otherwise."""
    for policy in policies:
        if sys.stderr.isatty():
            with _bar(f"eval {policy.label}", total) as progress:
                yield policy, progress
        else:
            print(f"evaluating {policy.label} on {total} problems", file=sys.stderr, flush=True)
            yield policy, None


def _table(results: list[tuple[Policy, Evaluation]], k: int, n: int, examples: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"held-out evaluation: {examples} problems, k = {k}" + (f", n = {n} samples each" if n > k else ""))
    many = k > 1
    voted = many and any(r.row.maj_at_k is not None for _, r in results)
    columns = ["policy", "RL steps", "pass@1", *([f"pass@{k}"] if many else []), *([f"maj@{k}"] if voted else []),
               "reward", "tokens", "truncated", "time"]
    for name in columns:
        table.add_column(name, justify="left" if name == "policy" else "right")
    for policy, result in results:
        r = result.row
        cells = [policy.label, "-" if policy.rl_steps is None else str(policy.rl_steps), f"{r.pass_at_1:.3f}",
                 *([f"{r.pass_at_k:.3f}"] if many else []),
                 *(["-" if r.maj_at_k is None else f"{r.maj_at_k:.3f}"] if voted else []),
                 f"{r.mean_reward:.3f}", f"{r.mean_tokens:.1f}", f"{100 * r.truncated_share:.1f}%", f"{r.wall_s:.1f}s"]
        table.add_row(*cells)
    Console(width=max(100, Console().width)).print(table)
