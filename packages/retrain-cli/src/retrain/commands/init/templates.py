"""Starter configs shipped as TOML files beside this module."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).with_name("templates")


@dataclass(frozen=True)
class Template:
    name: str
    filename: str  # default output file
    summary: str
    gpu: bool = False  # its model needs a CUDA GPU (Qwen3-4B on gpu:0)

    @property
    def path(self) -> Path:
        return FOLDER / f"{self.name}.toml"

    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")


TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in (
        Template("default", "retrain.toml", "local backend, MaxRL + GTPO/SEPA, 100 steps", gpu=True),
        Template("cpu", "retrain.toml", "the README demo: the tiny model learns arithmetic on this machine's CPU"),
        Template("smollm2", "retrain.toml",
                 "a real model (SmolLM2-135M-Instruct, the smollm2 extra) learns two-digit addition on the CPU"),
        Template("gemma3", "retrain.toml",
                 "a second real model (Gemma 3 270M, the gemma3 extra) learns one-digit addition on the CPU"),
        Template("quickstart", "retrain.toml", "GRPO without transforms, 20 small steps", gpu=True),
        Template("experiment", "retrain.toml", "seeded 500-step MaxRL + SEPA run with checkpoints", gpu=True),
        Template("campaign", "campaign.toml", "two conditions x four seeds", gpu=True),
        Template("dataset", "retrain.toml", "any table of prompts by config: GSM8K from the local hub cache",
                 gpu=True),
        Template("verifiers", "retrain.toml", "a verifiers taskset's prompts and rewards, tiny model on the CPU"),
        Template("verifiers-multi-turn", "retrain.toml",
                 "a verifiers taskset's own multi-turn Env, tiny model on the CPU"),
        Template("openenv", "retrain.toml", "multi-turn episodes on an OpenEnv server, tiny model on the CPU"),
    )
}
