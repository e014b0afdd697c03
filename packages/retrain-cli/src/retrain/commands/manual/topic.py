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
    "exit": "exit-status",
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
    "pass@k": "eval",
    "lora-squeeze": "squeeze",
    "experiment-tree": "tree",
    "bench": "benchmark",
    "sft": "training",
    "kl": "training",
}


@dataclass(frozen=True)
class Topic:
    name: str
    title: str
    content: str


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
    from retrain.config.validate.built import not_built_doc

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
        lines.append(f"    {spec.key:<36} {spec.type_name():<10} default {default}{marker}")
    return "\n".join(lines)
