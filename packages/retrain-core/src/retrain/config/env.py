"""`.env` loading and the environment-variable fallbacks of empty W&B fields."""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

#: flat field -> environment variables tried in order when the field is empty.
ENV_FALLBACKS: dict[str, tuple[str, ...]] = {
    "wandb_project": ("RETRAIN_WANDB_PROJECT", "WANDB_PROJECT", "SOMA_WANDB_PROJECT"),
    "wandb_entity": ("RETRAIN_WANDB_ENTITY", "WANDB_ENTITY", "SOMA_WANDB_ENTITY"),
    "wandb_group": ("RETRAIN_WANDB_GROUP", "SOMA_WANDB_GROUP"),
    "wandb_tags": ("RETRAIN_WANDB_TAGS", "SOMA_WANDB_TAGS"),
}


def parse_dotenv(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        if line.startswith("export "):
            line = line[len("export "):]
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if key:
            out[key] = value
    return out


def load_dotenv(path: str | Path = ".env", environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Load `KEY=VALUE` lines into the environment; variables already set win (unlike the
    reference, which overwrote them). Returns the keys it set."""
    env = os.environ if environ is None else environ
    p = Path(path)
    if not p.is_file():
        return []
    try:
        values = parse_dotenv(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return []
    set_keys = []
    for key, value in values.items():
        if key not in env:
            env[key] = value
            set_keys.append(key)
    return set_keys


def env_fallbacks(current: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """{flat field: value} for empty W&B fields that an environment variable fills."""
    out: dict[str, str] = {}
    for flat, names in ENV_FALLBACKS.items():
        if current.get(flat):
            continue
        for name in names:
            if environ.get(name):
                out[flat] = environ[name]
                break
    return out
