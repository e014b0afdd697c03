"""Running a campaign: expand it, write each run's config and the manifest, run what is not
finished on the chosen executor, then summarise (and squeeze, with a [squeeze] table).

Running the same file again resumes the campaign: finished runs are left as they are (not a
file of theirs is written), every other run resumes from its last checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from retrain.campaign.expand import Campaign, RunSpec
from retrain.campaign.manifest import ManifestFile, RunEntry
from retrain.campaign.progress import CampaignView
from retrain.campaign.summary import ConditionRow, run_summary_script, summarize, summary_json
from retrain.campaign.worker import finished
from retrain.errors import UserError
from retrain.io import layout
from retrain.io.atomic import write_json_atomic, write_text_atomic

Executor = Callable[[Campaign, list[RunSpec], ManifestFile, CampaignView], None]


@dataclass
class CampaignResult:
    campaign: Campaign
    rows: list[ConditionRow]
    failed: list[RunEntry]
    skipped: list[str]
    summary_script: dict[str, Any] | None = None
    squeeze: dict[str, Any] | None = field(default=None)


def executor_for(campaign: Campaign) -> Executor:
    s = campaign.settings
    if s.executor == "ray":
        from retrain.campaign.cluster import run_on_ray

        return run_on_ray
    if s.parallel:
        from retrain.campaign.parallel import run_parallel

        return run_parallel
    from retrain.campaign.sequential import run_sequential

    return run_sequential


def _check_files(campaign: Campaign) -> None:
    script = campaign.settings.summary_script
    if script and not (campaign.file.parent / script).is_file():
        raise UserError(f"[campaign] summary_script = {script!r}: no such file next to {campaign.file}")


def run_campaign(campaign: Campaign, view: CampaignView,
                 squeeze: Callable[[Campaign, ManifestFile], dict[str, Any] | None] | None = None) -> CampaignResult:
    _check_files(campaign)
    manifest = ManifestFile(campaign)
    done = [r.name for r in campaign.runs if finished(r.log_dir)]
    for name in done:
        entry = manifest.entry(name)
        if entry.status != "finished":
            entry.status, entry.returncode, entry.error = "finished", 0, ""
    todo = [r for r in campaign.runs if r.name not in done]
    for run in todo:
        if manifest.entry(run.name).status == "running":  # its driver died with it
            manifest.entry(run.name).status = "interrupted"
        write_text_atomic(campaign.config_path(run), run.toml)
    manifest.save()
    view.begin([r.name for r in campaign.runs], done)
    try:
        if todo:
            executor_for(campaign)(campaign, todo, manifest, view)
    finally:
        view.close()
    result = CampaignResult(campaign, [], [e for e in manifest.data.runs if e.status == "failed"], done)
    if squeeze is not None:
        result.squeeze = squeeze(campaign, manifest)
    result.rows, finals = summarize(manifest.data)
    write_json_atomic(campaign.dir / layout.CAMPAIGN_SUMMARY, summary_json(result.rows, finals))
    result.summary_script = run_summary_script(campaign)
    if result.summary_script is not None:
        manifest.data.summary = result.summary_script
        manifest.save()
    return result
