"""Whether `[model] model` can be loaded here, answered before torch is imported: a run that
cannot load its model should say so in a second, naming the key, not after a minute of imports
and hub retries with a transformers traceback."""

from __future__ import annotations

import os
from pathlib import Path

from retrain.models.tiny import is_tiny
from retrain.models.unavailable import ModelUnavailable

_TRUE = frozenset({"1", "true", "yes", "on"})


def model_problem(name: str, revision: str = "", local_files_only: bool = False) -> str | None:
    """Why `name` cannot be loaded (None when it may be): a local folder that is missing or
    holds no config.json, or a hub id absent from the local cache while the hub is off."""
    if is_tiny(name):
        return None
    from retrain.models.gguf import gguf_source

    try:
        if gguf_source(name, assemble=False) is not None:
            return gguf_problem(name)
    except ModelUnavailable as exc:
        return str(exc).split(": ", 1)[1]
    path = Path(name).expanduser()
    if path.exists() or name.startswith(("/", "./", "../", "~")):
        if not path.is_dir():
            return f"{name} is not a folder" if path.exists() else f"no folder {name}"
        if not (path / "config.json").is_file():
            return f"{name} holds no config.json (a transformers model folder has one)"
        return None
    offline = local_files_only or os.environ.get("HF_HUB_OFFLINE", "").lower() in _TRUE \
        or os.environ.get("TRANSFORMERS_OFFLINE", "").lower() in _TRUE
    if not offline:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        cached = try_to_load_from_cache(name, "config.json", revision=revision or None)
    except Exception as exc:  # a malformed repo id
        return f"{name!r} is not a model folder or a hub model id ({type(exc).__name__}: {exc})"
    if not isinstance(cached, str):
        why = "local_files_only = true" if local_files_only else "the hub is off (HF_HUB_OFFLINE=1)"
        return f"{name} is not in the local Hugging Face cache and {why}"
    return None


def gguf_problem(name: str) -> str | None:
    try:
        import gguf  # noqa: F401
    except ImportError:
        return f"{name} is a GGUF file, and reading one needs the gguf package (uv sync --extra gguf)"
    return None


def require_model(name: str, revision: str = "", local_files_only: bool = False) -> None:
    problem = model_problem(name, revision, local_files_only)
    if problem is not None:
        raise ModelUnavailable(f"[model] model = {name!r}: {problem}",
                               hint="the built-in model \"tiny\" runs anywhere (retrain init -t cpu)")
