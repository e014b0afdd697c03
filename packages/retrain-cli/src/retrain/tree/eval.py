"""A node's result: its success metric averaged over the finished runs it produced (the runs
of its campaign, or its one run), from each run's last RL metrics row, or its last held-out
evaluation for `eval/...` metrics."""

from __future__ import annotations

from pathlib import Path

from retrain.io import layout
from retrain.io.json import load_json_object
from retrain.metrics.scan import iter_jsonl_objects, last_row, number
from retrain.status.scan import resolve_log_dir
from retrain.tree.model import Node
from retrain.tree.state import NodeState


def run_dirs(output: Path) -> list[Path]:
    """The finished runs under a node's output: a campaign dir's, or the run dir itself."""
    manifest = load_json_object(output / layout.CAMPAIGN_MANIFEST)
    dirs = [output]
    if manifest is not None:
        entries = [e for e in manifest.get("runs", []) if isinstance(e, dict)]
        dirs = [d for e in entries if (d := resolve_log_dir(output, e)) is not None]
    return [d for d in dirs if (load_json_object(d / layout.TRAINER_STATE) or {}).get("checkpoint_name") == layout.FINAL]


def final_value(run_dir: Path, metric: str) -> float | None:
    if metric.startswith("eval/"):
        return number((last_row(run_dir / layout.EVAL) or {}).get(metric))
    value = None
    for row in iter_jsonl_objects(run_dir / layout.METRICS):
        if row.get("phase") != "sft":
            value = number(row.get(metric))
    return value


def evaluate(node: Node, state: NodeState) -> str | None:
    """Set the node's result and outcome from its finished runs; returns the outcome, or None
    when the node has no success condition or nothing to measure yet."""
    if node.success is None or not state.campaign_dir:
        return None
    metric = node.success.metric
    values = [v for d in run_dirs(Path(state.campaign_dir)) if (v := final_value(d, metric)) is not None]
    if not values:
        state.outcome, state.result = "failure", {}
        state.error = f"no finished run reports {metric}"
        return state.outcome
    measured = sum(values) / len(values)
    state.result = {metric: round(measured, 4), "runs": len(values)}
    state.outcome = "success" if node.success.met(measured) else "failure"
    return state.outcome
