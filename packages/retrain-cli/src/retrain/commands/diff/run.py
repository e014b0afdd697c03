"""`retrain diff RUN_A RUN_B [--json] [--plot FILE]` and
`retrain diff CAMPAIGN_DIR CONDITION_A CONDITION_B [--json] [--plot FILE]`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from retrain.diff.compute import Side, compare, load_condition, load_run
from retrain.diff.format import render
from retrain.errors import UserError
from retrain.io import layout
from retrain.status.plot import Curves, require_matplotlib, write_plot

USAGE = "retrain diff RUN_A RUN_B  |  retrain diff CAMPAIGN_DIR CONDITION_A CONDITION_B"


def load_sides(targets: list[str]) -> tuple[Side, Side]:
    if len(targets) == 2:
        return load_run(Path(targets[0]), targets[0]), load_run(Path(targets[1]), targets[1])
    if len(targets) == 3:
        campaign = Path(targets[0])
        if not (campaign / layout.CAMPAIGN_MANIFEST).is_file():
            raise UserError(f"{campaign} is not a campaign folder (no manifest.json)", hint=USAGE)
        return load_condition(campaign, targets[1]), load_condition(campaign, targets[2])
    raise UserError(f"diff takes 2 runs or a campaign and 2 conditions, got {len(targets)} arguments",
                     hint=USAGE)


def run(targets: list[str], as_json: bool, plot: str | None) -> None:
    if plot:
        require_matplotlib()
    a, b = load_sides(targets)
    result = compare(a, b)
    print(json.dumps(result, indent=2) if as_json else render(result))
    if plot:
        written = write_plot([Curves(f"A: {a.label}", a.series), Curves(f"B: {b.label}", b.series)], Path(plot),
                             f"{a.label} vs {b.label}")
        print(f"plot: {written}", file=sys.stderr if as_json else sys.stdout)
