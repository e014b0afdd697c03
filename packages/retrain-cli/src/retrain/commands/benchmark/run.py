"""`retrain benchmark CONFIG|RUN_DIR|SUITE_DIR [--repeat N] [--output-dir DIR] [--json]
[--flag value ...]`: run CONFIG N times (each a fresh process) and print the spread of wall
time, s/step, tokens/s and final reward; or summarise a finished run or suite."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from retrain.commands.config_args import split_args
from retrain.commands.warnings import print_warnings
from retrain.errors import UserError

USAGE = "retrain benchmark CONFIG|RUN_DIR|SUITE_DIR [--repeat N] [--output-dir DIR] [--json] [--flag value ...]"


def run(args: list[str], repeat: int, output_dir: str | None, as_json: bool) -> None:
    from retrain.benchmark.format import format_run, format_suite
    from retrain.benchmark.run import Suite, run_repeats, summarize_dir

    target, overrides = split_args(args)
    if target is None:
        raise UserError("benchmark needs a config, a run folder or a suite folder", hint=USAGE)
    if Path(target).is_dir():
        if overrides:
            raise UserError("override flags apply when benchmarking a config, not a folder", hint=USAGE)
        result = summarize_dir(Path(target))
    else:
        from retrain.validation.load import load_config

        loaded = load_config(target, overrides)
        if loaded.kind != "single":
            raise UserError(f"{target} is a {loaded.kind} config; benchmark repeats single runs", hint=USAGE)
        print_warnings(loaded.warnings)
        result = run_repeats(loaded.config, loaded.path, repeat, output_dir,
                             say=lambda text: print(text, file=sys.stderr))
    if isinstance(result, Suite):
        if as_json:
            print(json.dumps({"path": str(result.folder), "runs": result.runs, "aggregate": result.stats}, indent=2))
        else:
            print(format_suite(str(result.folder), result.runs, result.stats))
    elif as_json:
        print(json.dumps(result, indent=2))
    else:
        print(format_run(result))
