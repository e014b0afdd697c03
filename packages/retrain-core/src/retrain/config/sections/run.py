"""Where a run writes, resumes from and finds plugins: `[logging]`, `[resume]` and `[plugins]`."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import msgspec

from retrain.config.sections.base import F, Section


class LoggingConfig(Section):
    log_dir: Annotated[str, F("Run output directory.")] = "logs/train"
    wandb_project: Annotated[str, F("W&B project; non-empty enables W&B.")] = ""
    wandb_run_name: Annotated[str, F("W&B run name; default basename(log_dir).")] = ""
    wandb_entity: Annotated[str, F("W&B entity.")] = ""
    wandb_group: Annotated[str, F("W&B group.")] = ""
    wandb_tags: Annotated[str, F("W&B tags, comma-separated.")] = ""
    trackers: Annotated[
        list[str],
        F("Experiment trackers every row goes to: wandb, tensorboard, mlflow, trackio, an entry "
          "point of group retrain.trackers, or a dotted path (a list or comma string); "
          "wandb_project non-empty adds wandb."),
    ] = msgspec.field(default_factory=list)
    tracker_project: Annotated[
        str, F("Project of trackio and experiment of MLflow (and W&B's project when wandb_project is "
               "empty); default wandb_project, else \"retrain\".")
    ] = ""
    checkpoint_artifacts: Annotated[
        Literal["auto", "off", "wandb"],
        F("Checkpoints as W&B artifacts: auto (when W&B is on), off, wandb (fail-closed: a "
          "checkpoint W&B did not store stops the run)."),
    ] = "auto"
    log_generations: Annotated[bool, F("Write emergence/generations.jsonl.")] = True
    generation_log_samples_per_prompt: Annotated[
        int, F("Completions logged per prompt (highest reward first); 0 = all.", ge=0)
    ] = 1
    generation_top_surprisal_limit: Annotated[
        int, F("Add the N most surprising tokens to each logged generation.", ge=0)
    ] = 0
    strategic_grams: Annotated[
        str | list[str], F("Planning grams: a list, a JSON array string, or CSV; empty = built-in list.")
    ] = ""

    def tracker_names(self) -> list[str]:
        """`trackers` in order, each once, with `wandb` first when `wandb_project` is set (how
        W&B was selected before trackers were a kind, and still is)."""
        return list(dict.fromkeys([*(["wandb"] if self.wandb_project else []), *self.trackers]))


class ResumeConfig(Section):
    _prefix: ClassVar[str] = "resume_"
    from_: Annotated[
        str, F("Log directory holding trainer_state.json to resume from.", flag="resume_from")
    ] = msgspec.field(default="", name="from")


class PluginsConfig(Section):
    _prefix: ClassVar[str] = "plugins_"
    search_paths: Annotated[
        list[str], F("Module prefixes tried before a plain dotted import (a list or comma string).")
    ] = msgspec.field(default_factory=lambda: ["plugins"])
    strict: Annotated[bool, F("Fail fast on plugin load or shape errors.")] = True
