"""What `retrain export SOURCE` exports, found without torch: the trained weights in SOURCE
(a run folder, a checkpoint folder or an adapter folder), whether they are a LoRA adapter or
full weights, and the base model they were trained on.

- A run folder (it holds run_meta.json): the config the run recorded names the base, its
  revision, trust_remote_code, the seed (the built-in `tiny`'s weights come from it) and whether
  it trained LoRA; the weights are its final adapter, or its latest checkpoint while it has
  not finished, or `--checkpoint NAME` under its adapter_path.
- A checkpoint or adapter folder: adapter_config.json (LoRA) or config.json with safetensors
  (full weights); the base from `--base`, else the checkpoint's checkpoint.json, else the
  adapter's base_model_name_or_path, else, for a full model folder with its tokenizer, the
  folder itself.

Paths a run recorded relative to the folder it ran in are looked up from here, from the run
folder, and from the folder the run ran in (the run folder less its configured log_dir).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from retrain.backends.export import BaseModel
from retrain.errors import UserError
from retrain.io.layout import FINAL, RUN_META
from retrain.training.state import STATE_FILE, StateError, read_state

CHECKPOINT_META = "checkpoint.json"
ADAPTER_CONFIG = "adapter_config.json"
#: where retrain 0.1.0 checkpoints kept their weights (LoRA, full)
LEGACY = {True: "adapter", False: "model"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


@dataclass(frozen=True)
class Source:
    weights: Path
    lora: bool
    base: BaseModel | None
    #: the backend that trained the weights ("" for a folder with no run)
    backend: str = ""
    provenance: dict[str, Any] = field(default_factory=dict)


def resolve(path: str, *, checkpoint: str | None = None, base: str | None = None,
            seed: int | None = None) -> Source:
    folder = Path(path)
    if not folder.is_dir():
        raise UserError(f"{path}: no such folder", hint="pass a run's log_dir, a checkpoint or an adapter folder")
    if (folder / RUN_META).is_file():
        found = _run(folder, checkpoint)
    elif checkpoint is not None:
        raise UserError(f"--checkpoint {checkpoint}: {path} is not a run folder (no {RUN_META})",
                        hint="pass the checkpoint's folder itself as SOURCE")
    else:
        found = _weights(folder, folder, None)
    named = found.base
    if base is not None:
        named = replace(named, name=base) if named is not None else BaseModel(base)
    if seed is not None:
        named = replace(named, seed=seed) if named is not None else None
    if named is None:
        raise UserError(f"{path}: the base model these weights were trained on is not recorded",
                        hint="pass --base MODEL (a hub id, a folder, or tiny with --seed N), or the run's log_dir")
    return replace(found, base=named)


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} cannot be read: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a JSON object")
    return data


def _weights(folder: Path, source: Path, run_base: BaseModel | None) -> Source:
    """The weights in a checkpoint or adapter folder (0.1.0's nested layout included)."""
    meta = _json(folder / CHECKPOINT_META) if (folder / CHECKPOINT_META).is_file() else {}
    lora = _kind(folder)
    if "lora" in meta and bool(meta["lora"]) != lora:
        raise UserError(f"{folder / CHECKPOINT_META} says lora = {meta['lora']}, but the folder holds "
                        f"{'a LoRA adapter' if lora else 'full weights'}")
    recorded = run_base or _folder_base(folder, meta, lora)
    if recorded is not None and recorded.seed is None and isinstance(meta.get("seed"), int):
        recorded = replace(recorded, seed=int(meta["seed"]))
    provenance = {"checkpoint": folder.name, "path": str(folder.resolve())}
    if source != folder:
        provenance["run"] = str(source.resolve())
    return Source(folder, lora, recorded, provenance=provenance)


def _kind(folder: Path) -> bool:
    """True for a LoRA adapter, False for full weights; UserError for anything else."""
    for lora in (True, False):
        inner = folder / LEGACY[lora]
        where = inner if inner.is_dir() else folder
        if lora and (where / ADAPTER_CONFIG).is_file():
            return True
        if not lora and (where / "config.json").is_file() and any(where.glob("*.safetensors")):
            return False
    raise UserError(f"{folder} is not a run folder ({RUN_META}), a checkpoint or an adapter folder "
                    f"({ADAPTER_CONFIG}, or config.json with safetensors)")


def _folder_base(folder: Path, meta: dict[str, Any], lora: bool) -> BaseModel | None:
    named = str(meta.get("model") or "")
    if not named and lora:
        inner = folder / LEGACY[True]
        config = _json((inner if inner.is_dir() else folder) / ADAPTER_CONFIG)
        named = str(config.get("base_model_name_or_path") or "")
    if not named and not lora and any((folder / f).is_file() for f in TOKENIZER_FILES):
        named = str(folder)
    seed = meta.get("seed")
    return BaseModel(named, seed=seed if isinstance(seed, int) else None) if named else None


def _run(log_dir: Path, checkpoint: str | None) -> Source:
    meta = _json(log_dir / RUN_META)
    config = meta.get("config")
    if not isinstance(config, dict) or not config.get("model"):
        raise UserError(f"{log_dir / RUN_META} records no config with a model")
    raw_options = config.get("backend_options")
    options: dict[str, Any] = raw_options if isinstance(raw_options, dict) else {}
    seed = meta.get("seed", config.get("seed"))
    base = BaseModel(str(config["model"]), str(config.get("model_revision") or ""),
                     bool(config.get("model_local_files_only")), bool(options.get("trust_remote_code")),
                     seed if isinstance(seed, int) and seed >= 0 else None)
    roots = _roots(log_dir, str(config.get("log_dir") or ""))
    if checkpoint is not None:
        folder = _find(roots, Path(str(config.get("adapter_path") or "")) / checkpoint)
        if folder is None:
            raise UserError(f"--checkpoint {checkpoint}: no such folder under the run's adapter_path "
                            f"{config.get('adapter_path')!r}")
        step = None
    else:
        folder, step = _latest(log_dir, roots)
    lora = not bool(options.get("train_full_model"))
    found = _weights(folder, log_dir, base)
    if found.lora != lora:
        raise UserError(f"{folder} holds {'a LoRA adapter' if found.lora else 'full weights'}, but the run's "
                        f"config trains {'LoRA' if lora else 'every weight (train_full_model = true)'}")
    provenance = {**found.provenance, "run_id": meta.get("run_id"), "config": meta.get("config_path"),
                  **({"rl_steps": step} if step is not None else {})}
    return replace(found, backend=str(config.get("backend") or ""), provenance=provenance)


def _roots(log_dir: Path, configured: str) -> list[Path]:
    """Where the run's relative paths may start: here, the run folder, and the folder it ran
    in when the run folder's path ends with its configured log_dir."""
    roots = [Path("."), log_dir]
    parts = Path(configured).parts
    resolved = log_dir.resolve()
    if parts and not Path(configured).is_absolute() and resolved.parts[-len(parts):] == parts:
        roots.append(Path(*resolved.parts[:-len(parts)]))
    return roots


def _find(roots: list[Path], recorded: Path) -> Path | None:
    if recorded.is_absolute():
        return recorded if recorded.is_dir() else None
    for root in roots:
        if (root / recorded).is_dir():
            return root / recorded
    return None


def _latest(log_dir: Path, roots: list[Path]) -> tuple[Path, int | None]:
    """The run's final adapter, or its latest checkpoint while unfinished, and its RL steps."""
    if not (log_dir / STATE_FILE).is_file():
        raise UserError(f"{log_dir} holds no {STATE_FILE}: the run has saved no weights yet")
    try:
        state = read_state(log_dir)
    except StateError as exc:
        raise UserError(str(exc)) from None
    folder = _find(roots, Path(state.checkpoint_path)) if state.checkpoint_path else None
    if folder is None:
        raise UserError(f"checkpoint {state.checkpoint_path!r} recorded in {log_dir / STATE_FILE} is missing",
                        hint="run retrain export from the folder the run ran in, or pass the checkpoint folder")
    return folder, state.step + 1 if state.checkpoint_name == FINAL else None
