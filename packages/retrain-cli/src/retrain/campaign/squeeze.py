"""The post-campaign squeeze summary: with a `[squeeze]` table in the campaign file, the rank
analysis of the first finished run's final adapter, printed and recorded in the manifest
(`squeeze.recommended_rank`, the run, the rank table). A squeeze error is reported and
recorded; it never fails the campaign whose runs succeeded."""

from __future__ import annotations

from typing import Any, TextIO

from retrain.campaign.expand import Campaign
from retrain.campaign.manifest import ManifestFile
from retrain.config.source import read_toml
from retrain.errors import UserError


def squeeze_first_run(campaign: Campaign, manifest: ManifestFile, stream: TextIO) -> dict[str, Any] | None:
    from retrain.squeeze.run import analyse, format_table, parse_squeeze

    done = [e for e in manifest.data.runs if e.status == "finished"]
    if not done:
        return None
    entry = done[0]
    try:
        settings = parse_squeeze(read_toml(campaign.file))
        analysis = analyse(entry.adapter_path, settings)
    except UserError as exc:
        print(f"warning: squeeze of {entry.run_name} failed: {exc}", file=stream)
        manifest.data.squeeze = {"run": entry.run_name, "error": str(exc)}
        manifest.save()
        return manifest.data.squeeze
    print(format_table(analysis), file=stream)
    manifest.data.squeeze = {"run": entry.run_name, **analysis.as_dict()}
    manifest.save()
    return manifest.data.squeeze
