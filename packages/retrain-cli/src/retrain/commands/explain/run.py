"""`retrain explain [CONFIG] [--flag value ...] [--json]`: what a run of CONFIG would do, after
the checks the run makes before it starts: loading (every validation pass) and, for a trainer
that starts with it, the flow preflight (`retrain.validation.trace`), so explain refuses, exit
status 2, what the run would refuse, and lists the preflight's warnings with the others."""

from __future__ import annotations

import json
from typing import Any

from retrain.commands.config_args import resolve_config_args
from retrain.commands.explain.summary import campaign_summary, single_summary, squeeze_summary
from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.validation.data import check_data_files
from retrain.validation.load import load_config
from retrain.validation.trace import PREFLIGHT_TRAINERS, trace

_SKIP_TEXT = {"mode", "warnings", "dep_warnings"}


def run(args: list[str], as_json: bool) -> None:
    path, overrides = resolve_config_args(args)
    loaded = load_config(path, overrides)
    if loaded.kind == "campaign":
        summary = campaign_summary(loaded)
    elif loaded.kind == "squeeze":
        summary = squeeze_summary(loaded)
    else:
        check_data_files(loaded.config)  # data the run cannot read fails here as it would there
        summary = single_summary(loaded)
        summary["warnings"] += preflight_warnings(loaded.config)
    if as_json:
        print(json.dumps(summary, indent=2, sort_keys=False))
        return
    print(render_text(summary))


def preflight_warnings(config: TrainConfig) -> list[str]:
    """The flow preflight's warnings (its dependency ones are `dep_warnings` already); a
    UserError with the run's own line when the preflight fails."""
    if config.training.trainer not in PREFLIGHT_TRAINERS:
        return []
    report = trace(config)
    if (refused := report.refusal()) is not None:
        raise UserError(refused, hint="the run refuses this config before it starts")
    return [f"flow warning [{i.category}]: {i.message}" for i in report.issues if i.category != "dep"]


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        if not v:
            return "{}"
        return ", ".join(f"{k}={_value(x)}" for k, x in v.items())
    if isinstance(v, list):
        return ", ".join(map(str, v)) if v else "(none)"
    if v == "" or v is None:
        return "-"
    return str(v)


def render_text(summary: dict[str, Any]) -> str:
    lines = [f"retrain explain — dry-run preview ({summary['mode']})", ""]
    keys = [k for k in summary if k not in _SKIP_TEXT]
    width = max(len(k) for k in keys)
    for key in keys:
        value = summary[key]
        if key == "backend_options" and isinstance(value, dict):
            non_default = value
            lines.append(f"  {key:<{width}} : {len(non_default)} options (see --json)")
            continue
        lines.append(f"  {key:<{width}} : {_value(value)}")
    for title, items in (("Warnings", summary.get("warnings")), ("Missing dependencies", summary.get("dep_warnings"))):
        if items:
            lines += ["", f"{title}:"] + [f"  - {item}" for item in items]
    return "\n".join(lines)
