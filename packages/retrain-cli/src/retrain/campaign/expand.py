"""Conditions x seeds -> the runs of a campaign, each with its own log and adapter dirs.

The campaign directory is the file's `[logging] log_dir`, or `logs/<file stem>` when the file
leaves it at the default (the reference used `logs/campaign_<timestamp>`: a fixed folder is
what lets `retrain campaign.toml` find and resume an interrupted campaign). Runs live in
`<dir>/runs/<run_name>`; adapters in `<adapter_path>/<run_name>` when the file sets
`[backend] adapter_path`, else `<dir>/adapters/<run_name>` (the reference shared one adapter
path, so the runs of a campaign overwrote each other's checkpoints).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import msgspec

from retrain.campaign.configs import config_toml, fingerprint
from retrain.campaign.parse import CampaignPlan, Condition
from retrain.config.schema import CampaignConfig, TrainConfig
from retrain.config.source import TomlSource
from retrain.io import layout
from retrain.validation.backend import backend_entry, capabilities_of

_UNSAFE = re.compile(r"[^A-Za-z0-9_.+~=,@-]")


@dataclass(frozen=True)
class RunSpec:
    name: str
    condition: Condition
    seed: int
    config: TrainConfig
    toml: str

    @property
    def log_dir(self) -> Path:
        return Path(self.config.logging.log_dir)

    @property
    def adapter_path(self) -> Path:
        return Path(self.config.backend.adapter_path)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.toml)


@dataclass(frozen=True)
class Campaign:
    """An expanded campaign: where it lives and its runs in condition-major order."""

    file: Path
    dir: Path
    settings: CampaignConfig
    max_steps: int
    runs: list[RunSpec]

    @property
    def conditions(self) -> list[str]:
        return list(dict.fromkeys(r.condition.label for r in self.runs))

    def config_path(self, run: RunSpec) -> Path:
        return self.dir / layout.CAMPAIGN_CONFIGS / f"{run.name}.toml"

    @property
    def import_roots(self) -> list[str]:
        """Folders a run imports plugin and reward modules from (as `load_config` did)."""
        return list(dict.fromkeys([str(self.file.parent.resolve()), str(Path.cwd())]))


def run_name(label: str, seed: int) -> str:
    return _UNSAFE.sub("_", f"{label}_s{seed}")


def _set_by_file(source: TomlSource, section: str, key: str) -> bool:
    table = source.data.get(section)
    return isinstance(table, dict) and bool(table.get(key))


TINKER_THROTTLE = "tinker_throttle"


def campaign_dir(source: TomlSource, base: TrainConfig) -> Path:
    if _set_by_file(source, "logging", "log_dir"):
        return Path(base.logging.log_dir).resolve()
    return (Path("logs") / Path(source.path).stem).resolve()


def expand(plan: CampaignPlan, source: TomlSource) -> Campaign:
    folder = campaign_dir(source, plan.base)
    adapters = (Path(plan.base.backend.adapter_path).resolve() if _set_by_file(source, "backend", "adapter_path")
                else folder / "adapters")
    runs = []
    for condition in plan.conditions:
        for seed in plan.settings.seeds:
            name = run_name(condition.label, seed)
            config = _run_config(condition.config, condition.label, name, seed, plan.max_steps,
                                 folder / layout.CAMPAIGN_RUNS / name, adapters / name, folder / TINKER_THROTTLE)
            header = f"run {name} of campaign {source.path}\nrerun alone: retrain THIS_FILE"
            runs.append(RunSpec(name, condition, seed, config, config_toml(config, header)))
    return Campaign(Path(source.path), folder, plan.settings, plan.max_steps, runs)


def _run_config(config: TrainConfig, label: str, name: str, seed: int, max_steps: int, log_dir: Path,
                adapter_path: Path, throttle: Path) -> TrainConfig:
    """The campaign's runs on a remote service (tinker) share one throttle (at most
    max_concurrent remote calls in flight across the parallel runs) unless the file names its own."""
    replace = msgspec.structs.replace
    backend = replace(config.backend, adapter_path=str(adapter_path))
    if capabilities_of(backend_entry(config)).service_settings and not config.backend.throttle_dir:
        backend = replace(backend, throttle_dir=str(throttle))
    logging = replace(config.logging, log_dir=str(log_dir))
    if config.logging.wandb_project:
        logging = replace(logging, wandb_group=config.logging.wandb_group or label,
                          wandb_run_name=name, wandb_tags=config.logging.wandb_tags or f"{label},seed{seed}")
    return replace(config,
                   training=replace(config.training, seed=seed, max_steps=max_steps),
                   backend=backend,
                   logging=logging,
                   resume=replace(config.resume, from_=""))
