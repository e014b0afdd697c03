"""Whether a checkpoint folder holds what was written: `digests.json`, each file's size and
sha256, written last into every checkpoint (`seal`), once the backend's files and the
checkpoint's trainer_state.json are on disk; `damage` compares the folder with it.

A checkpoint written before digests were kept is checked by form instead: a safetensors file
must hold its header and every tensor it lists, a torch `.pt` file must be a whole zip archive
(torch.save's format) whose members pass their CRC, a `.json` file must parse. That catches a
truncated or empty file, not a flipped bit inside one.

`newest_good` finds the checkpoint a resume falls back to when the recorded one is damaged:
the newest older sibling in the adapter folder that holds a trainer state and passes.

Torch-free (`retrain resume-check` runs it); reading a 1 GB file takes about a second.
"""

from __future__ import annotations

import json
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

from retrain.io.atomic import write_json_atomic
from retrain.io.digest import file_sha256
from retrain.io.layout import CHECKPOINT_DIGESTS, FINAL
from retrain.training.state import STATE_FILE, StateError, TrainerState, read_state


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != CHECKPOINT_DIGESTS)


def seal(folder: str | Path) -> None:
    """Write the digests of every file under `folder` (atomically, last)."""
    root = Path(folder)
    files = {p.relative_to(root).as_posix(): {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
             for p in _files(root)}
    write_json_atomic(root / CHECKPOINT_DIGESTS, {"algorithm": "sha256", "files": files})


def damage(folder: str | Path) -> list[str]:
    """What is wrong with the checkpoint in `folder`, one line per file (empty: nothing)."""
    root = Path(folder)
    if not root.is_dir():
        return [f"{root}: missing"]
    record = root / CHECKPOINT_DIGESTS
    if not record.exists():
        return [problem for p in _files(root) if (problem := _form(p, root))]
    try:
        files = json.loads(record.read_text())["files"]
        expected = {str(name): (int(f["bytes"]), str(f["sha256"])) for name, f in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return [f"{CHECKPOINT_DIGESTS}: unreadable ({exc})"]
    found: list[str] = []
    for name, (size, sha) in sorted(expected.items()):
        path = root / name
        if not path.is_file():
            found.append(f"{name}: missing")
        elif (actual := path.stat().st_size) != size:
            found.append(f"{name}: {actual} bytes, {size} when written")
        elif file_sha256(path) != sha:
            found.append(f"{name}: its sha256 differs from the one recorded when it was written")
    return found


def _form(path: Path, root: Path) -> str:
    """A file's problem by the form its suffix promises, or ""."""
    name = path.relative_to(root).as_posix()
    try:
        if path.suffix == ".safetensors":
            return _safetensors_form(path, name)
        if path.suffix == ".pt":
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
            return f"{name}: member {bad} fails its CRC" if bad else ""
        if path.suffix == ".json":
            json.loads(path.read_text())
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        return f"{name}: {'empty' if path.stat().st_size == 0 else f'unreadable ({exc})'}"
    return ""


def _safetensors_form(path: Path, name: str) -> str:
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"{name}: {'empty' if size == 0 else f'{size} bytes, shorter than a safetensors header'}"
        (length,) = struct.unpack("<Q", head)
        if 8 + length > size:
            return f"{name}: {size} bytes, its header alone needs {8 + length}"
        header = json.loads(f.read(length))
    end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    return f"{name}: {size} bytes, its tensors need {8 + length + end}" if 8 + length + end > size else ""


@dataclass(frozen=True)
class Fallback:
    """A checkpoint a resume can start from, and the trainer state it records."""

    path: Path
    state: TrainerState


def progress(state: TrainerState) -> tuple[int, int]:
    """Order of checkpoints in a run: warmup ones first, then RL ones, each by step."""
    return (0, state.sft_step) if state.phase == "sft" else (1, state.step)


def newest_good(damaged: Path, before: TrainerState) -> Fallback | None:
    """The newest checkpoint beside `damaged` that was saved before `before` and is whole."""
    candidates: list[Fallback] = []
    for folder in damaged.parent.iterdir() if damaged.parent.is_dir() else []:
        if folder == damaged or folder.name == FINAL or not (folder / STATE_FILE).is_file():
            continue
        try:
            state = read_state(folder)
        except StateError:
            continue
        if progress(state) < progress(before):
            candidates.append(Fallback(folder, state))
    for candidate in sorted(candidates, key=lambda c: progress(c.state), reverse=True):
        if not damage(candidate.path):
            return candidate
    return None
