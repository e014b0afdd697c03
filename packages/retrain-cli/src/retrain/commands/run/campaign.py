"""`retrain campaign.toml`: run (or resume) a campaign and print its summary table; exit 1
naming the failed runs."""

from __future__ import annotations

import sys
from typing import Any

from retrain.commands.errors import CommandFailed
from retrain.commands.warnings import print_warnings
from retrain.validation.load import load_config


def run(path: str) -> None:
    from retrain.campaign.expand import expand
    from retrain.campaign.parse import parse_campaign
    from retrain.campaign.progress import make_view
    from retrain.campaign.run import run_campaign
    from retrain.campaign.summary import format_table

    loaded = load_config(path)
    print_warnings(loaded.warnings)
    assert loaded.source is not None
    campaign = expand(parse_campaign(loaded.source, loaded), loaded.source)
    squeeze = None
    if isinstance(loaded.source.data.get("squeeze"), dict):
        _check_squeeze(loaded.source)
        squeeze = _squeeze_step
    n_cond = len(campaign.conditions)
    print(f"campaign {path}: {n_cond} condition{'s' * (n_cond != 1)} x {len(campaign.settings.seeds)} seeds = "
          f"{len(campaign.runs)} runs, {campaign.max_steps} steps each, executor "
          f"{_executor_name(campaign.settings)}; results in {campaign.dir}", file=sys.stderr)
    result = run_campaign(campaign, make_view(), squeeze)
    print(format_table(result.rows))
    script = result.summary_script
    if script is not None and script["returncode"] != 0:
        print(f"warning: summary script {script['script']} exited with status {script['returncode']}",
              file=sys.stderr)
    if result.failed:
        names = "; ".join(f"{e.run_name} ({e.error or 'failed'})" for e in result.failed)
        raise CommandFailed(f"{len(result.failed)} of {len(campaign.runs)} runs failed: {names}; "
                            f"`retrain {path}` again resumes them", code=1)
    print(f"All {len(campaign.runs)} runs completed. Results in {campaign.dir}", file=sys.stderr)


def _executor_name(settings: Any) -> str:
    if settings.executor == "ray":
        return f"ray ({settings.ray_address or 'local instance'})"
    if settings.parallel:
        return f"parallel ({settings.max_workers or 'all'} workers)"
    return "sequential"


def _check_squeeze(source: Any) -> None:
    from retrain.config import ConfigError, ConfigIssue
    from retrain.squeeze.run import parse_squeeze

    if parse_squeeze(source).adapter_path:
        raise ConfigError([ConfigIssue(
            "a campaign squeezes its first finished run's adapter", key="[squeeze] adapter_path",
            path=source.path, line=source.line_of("squeeze", "adapter_path"),
            hint="remove adapter_path from the campaign file (a squeeze file of its own takes one)")])


def _squeeze_step(campaign: Any, manifest: Any) -> dict[str, Any] | None:
    """After the runs: the rank analysis of the first finished run's final adapter."""
    from retrain.campaign.squeeze import squeeze_first_run

    return squeeze_first_run(campaign, manifest, sys.stderr)
