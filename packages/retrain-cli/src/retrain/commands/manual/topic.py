"""Manual topics: text files beside this module, with schema-generated blocks filled in.

A topic file's first line is its title. `{{OPTIONS}}` expands to every override flag and
`{{KEYS}}` to every TOML key with type and default, both generated from the config schema so
the manual cannot drift from the code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).with_name("topics")
ALIASES = {
    "environments": "environment",
    "campaigns": "campaign",
    "advantage": "advantages",
    "algorithms": "advantages",
    "objectives": "advantages",
    "exit": "exit-status",
    "faults": "reliability",
    "sigterm": "reliability",
    "preemption": "reliability",
    "flags": "options",
    "config": "configuration",
    "keys": "configuration",
    "top": "status",
    "diff": "status",
    "serve": "inference",
    "vllm": "inference",
    "sglang": "inference",
    "exporter": "status",
    "prometheus": "status",
    "evaluation": "eval",
    "dataset": "data",
    "datasets": "data",
    "pass@k": "eval",
    "lora-squeeze": "squeeze",
    "experiment-tree": "tree",
    "bench": "benchmark",
    "sft": "training",
    "kl": "training",
    "teacher": "distillation",
    "distill": "distillation",
    "reward-model": "distillation",
    "qwen": "models",
    "gemma": "models",
    "multimodal": "models",
    "gguf": "export",
    "merge": "export",
}


#: One line per topic for `retrain man`'s table of contents (a test keeps it to the topic files).
SUMMARIES = {
    "advantages": "how rewards become per-token advantages: GRPO, MaxRL, GTPO, SEPA, Delight",
    "backends": "where training runs: local, unsloth, tinker; their options",
    "benchmark": "repeated runs of one config and the spread across them",
    "campaign": "sweeps of conditions x seeds, resumed when run again",
    "commands": "every retrain command in one screen",
    "configuration": "every TOML section and key, with type and default",
    "data": "any table of prompts by config ([data] source = \"dataset\"), and retrain data",
    "distillation": "on-policy distillation from a teacher ([teacher]) and reward models ([reward] type = \"model\")",
    "environment": "prompts and rewards from verifiers or OpenEnv environments",
    "eval": "held-out pass@k during training ([eval]) and after it (retrain eval)",
    "exit-status": "what each exit status means",
    "export": "a run's model as a transformers folder, a PEFT adapter or a GGUF (retrain export)",
    "files": "the files retrain reads and writes",
    "inference": "sampling in-process or on a vLLM / SGLang / OpenAI-compatible server",
    "logging": "what a run writes: metrics.jsonl, state, run_meta.json, adapters, W&B",
    "models": "model families: multimodal checkpoints, LoRA targets, end of turn, Qwen3.5's kernels",
    "options": "every override flag (--max-steps, --backend-opt KEY=VALUE, ...)",
    "plugins": "your own advantages, transforms, rewards, data, backends as dotted paths",
    "quickstart": "the bundled CPU demo, then your own config: write, preview, run",
    "reliability": "what a run keeps under SIGTERM, SIGKILL, a full disk, damaged checkpoints, shared folders",
    "squeeze": "LoRA-Squeeze: how much of an adapter's rank is used, and a smaller adapter",
    "status": "watching runs (status, top), comparing them (diff), Prometheus export",
    "tinker": "training on the Tinker service with the same TOML",
    "trace": "preflight of the training flow without a GPU",
    "trainers": "runners other than the RL loop: ttt_discover, command, optimizer_replay",
    "training": "the RL loop, resume, what a run prints, KL, supervised fine-tuning",
    "tree": "experiment trees: nodes, success conditions and what they unlock",
    "troubleshooting": "common errors and what to do about them",
    "validation": "what loading a config checks, in order, and what is refused",
}


@dataclass(frozen=True)
class Topic:
    name: str
    title: str
    content: str

    @property
    def summary(self) -> str:
        return SUMMARIES.get(self.name, self.title)


def topic_names() -> list[str]:
    return sorted(p.stem for p in FOLDER.glob("*.txt"))


def load_topic(name: str) -> Topic | None:
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    path = FOLDER / f"{key}.txt"
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    title, _, body = text.partition("\n")
    return Topic(key, title.strip(), expand(body.strip("\n")))


def expand(text: str) -> str:
    if "{{OPTIONS}}" in text:
        text = text.replace("{{OPTIONS}}", options_block())
    if "{{KEYS}}" in text:
        text = text.replace("{{KEYS}}", keys_block())
    return text


def options_block() -> str:
    from retrain.config.fields import all_fields
    from retrain.config.override import ALIASES as FLAG_ALIASES
    from retrain.config.override import MAPPING_FLAGS

    lines = []
    for spec in all_fields():
        if spec.is_mapping:
            continue
        lines.append(f"    {spec.flag:<44} {spec.label}")
    for flag, target in MAPPING_FLAGS.items():
        lines.append(f"    {flag + ' KEY=VALUE':<44} merge into {target} (repeatable)")
    for flag, target in FLAG_ALIASES.items():
        lines.append(f"    {flag:<44} alias of --{target.replace('_', '-')}")
    return "\n".join(lines)


def keys_block() -> str:
    from retrain.config.fields import all_fields
    from retrain.validation.built import not_built_doc
    from retrain.validation.inert import inert_doc

    lines = []
    section = ""
    for spec in all_fields():
        if spec.section != section:
            section = spec.section
            lines.append(f"  [{section}]")
        default = "{}" if spec.is_mapping and not spec.default else repr(spec.default)
        default = "unset" if spec.default is None else default
        doc = not_built_doc(spec.dotted).replace("**Not built yet:** ", "").replace("`", "").rstrip(".")
        marker = f"  [not built yet: {doc}]" if doc else ""
        live = inert_doc(spec.dotted).replace("**Live with** ", "").rstrip(".")
        marker += f"  [live with {live}]" if live else ""
        lines.append(f"    {spec.key:<36} {spec.type_name():<10} default {default}{marker}")
    return "\n".join(lines)
