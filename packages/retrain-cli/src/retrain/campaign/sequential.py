"""Sequential campaigns: one run after another, trained in the driver's own process."""

from __future__ import annotations

from retrain.campaign.expand import Campaign, RunSpec
from retrain.campaign.manifest import ManifestFile
from retrain.campaign.progress import CampaignView
from retrain.campaign.worker import ViewReporter, train_in_process


def run_sequential(campaign: Campaign, runs: list[RunSpec], manifest: ManifestFile, view: CampaignView) -> None:
    for run in runs:
        manifest.started(run.name)
        view.started(run.name, manifest.entry(run.name).attempts)
        outcome = train_in_process(run, ViewReporter(view, run.name), str(campaign.config_path(run)))
        manifest.ended(run.name, outcome.status, outcome.error, outcome.returncode)
        view.ended(run.name, outcome.status, outcome.error)
        if outcome.status == "interrupted":
            raise KeyboardInterrupt
