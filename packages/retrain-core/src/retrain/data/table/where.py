"""Where a table comes from, opened with `datasets` as one split.

- a JSONL, JSON, CSV, parquet or Arrow file, or a glob of files of one format: one split,
  `train`;
- a folder of such files: `datasets` infers the format, and the splits from the file names
  (`train.parquet`, `test-00000.jsonl`, ...); a folder `save_to_disk` wrote is loaded as saved;
- a hub id: read from this machine's cache only, never downloaded: the prepared copy
  `datasets` keeps under its cache (what an earlier `load_dataset` left), else a snapshot
  of the repository in the hub cache (`huggingface-cli download --repo-type dataset`). An id
  in neither is a `DataError` naming both places, at once.

`datasets` converts files to Arrow once, into its cache (keyed by the files' paths, sizes and
times), and maps that Arrow file into memory, so the rows are not read into the process. Its
progress bars and log lines are kept off the terminal here. A file `datasets` cannot read is
a `DataError` naming it and, for text, the line (`retrain.data.table.diagnose`).
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrain.data.source import DataError
from retrain.data.table.diagnose import check_utf8, explain_failure

#: file suffix -> the `datasets` builder that reads it
BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}
#: builders whose files are text a person may have written (checked for UTF-8 and located by line)
TEXT_BUILDERS = ("json", "csv")
#: the split a file or a glob is
FILE_SPLIT = "train"


@dataclass(frozen=True)
class Where:
    """A table as a config names it: `key` is the config key (for messages), then a path or a hub id."""

    key: str
    path: str = ""
    name: str = ""
    subset: str = ""

    @property
    def label(self) -> str:
        return self.name + (f" ({self.subset})" if self.subset else "") if self.name else self.path


@dataclass(frozen=True)
class Opened:
    """One split of a table: the `datasets.Dataset`, and the data files it was read from in row
    order where that is known (one file, or a glob's files in sorted order)."""

    dataset: Any
    where: Where
    split: str
    files: tuple[Path, ...] = ()

    @property
    def label(self) -> str:
        return self.where.label + (f" [{self.split}]" if self.split != FILE_SPLIT or self.where.name else "")


def datasets_cache() -> Path:
    """Where `datasets` keeps prepared data sets (its own rule: HF_DATASETS_CACHE, else HF_HOME/datasets)."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return Path(os.environ["HF_DATASETS_CACHE"]).expanduser()
    return hf_home() / "datasets"


def hub_cache() -> Path:
    """Where huggingface_hub keeps repository snapshots (HF_HUB_CACHE, else HF_HOME/hub)."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(name):
            return Path(os.environ[name]).expanduser()
    return hf_home() / "hub"


def hf_home() -> Path:
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "huggingface"


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """`datasets`' progress bars and log lines, and the hub client's (its "Retrying in 1s" lines
    when the hub cannot be reached), off inside the block, restored after."""
    import datasets  # type: ignore[import-untyped]
    from datasets.utils import logging as ds_logging  # type: ignore[import-untyped]

    hub = logging.getLogger("huggingface_hub")
    bars, level, hub_level = datasets.is_progress_bar_enabled(), ds_logging.get_verbosity(), hub.level
    datasets.disable_progress_bars()
    ds_logging.set_verbosity(ds_logging.CRITICAL)
    hub.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        ds_logging.set_verbosity(level)
        hub.setLevel(hub_level)
        if bars:
            datasets.enable_progress_bars()


def open_split(where: Where, split: str) -> Opened:
    """The split `split` of the table at `where`, or a DataError that names the culprit."""
    try:
        import datasets  # noqa: F401
    except ImportError:
        raise DataError(f"{where.key}: reading tables needs the `datasets` package (pip install datasets)") from None
    with quiet():
        opened = _from_hub(where, split) if where.name else _from_path(where, split)
    if getattr(opened.dataset, "_indices", None) is not None:  # a selection saved with its index mapping
        opened = Opened(opened.dataset.flatten_indices(), where, split, opened.files)
    import pyarrow as pa  # type: ignore[import-untyped]

    # converting files to Arrow leaves the batches it freed in Arrow's memory pool (half a
    # gigabyte for a million GSM8K rows); given back, a first load holds what a later one does
    pa.default_memory_pool().release_unused()
    return opened


def is_glob(path: str) -> bool:
    return any(ch in path for ch in "*?[")


def _from_path(where: Where, split: str) -> Opened:
    text = where.path
    if is_glob(text):
        files = [Path(p) for p in sorted(glob.glob(os.path.expanduser(text), recursive=True)) if Path(p).is_file()]
        if not files:
            raise DataError(f"{where.key} {text!r} matches no file")
        return _from_files(where, files, split)
    path = Path(text).expanduser()
    if not path.exists():
        raise DataError(f"{where.key} {text!r} does not exist")
    if path.is_dir():
        if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
            return _from_saved(where, path, split)
        return _from_folder(where, path, split)
    return _from_files(where, [path], split)


def _builder(where: Where, files: list[Path]) -> str:
    kinds = {BUILDERS.get(f.suffix.lower()) for f in files}
    if None in kinds:
        odd = next(f for f in files if f.suffix.lower() not in BUILDERS)
        raise DataError(f"{where.key}: {odd} is not a data file retrain reads (one of {', '.join(BUILDERS)})")
    if len(kinds) > 1:
        raise DataError(f"{where.key} {where.path!r} mixes formats ({', '.join(sorted(k or '' for k in kinds))}); "
                        "a table is one format")
    return kinds.pop() or ""


def _from_files(where: Where, files: list[Path], split: str) -> Opened:
    import datasets

    if split != FILE_SPLIT:
        raise DataError(f"{where.key} {where.path!r} is one split, {FILE_SPLIT!r}, not {split!r}",
                        hint="name the splits by a folder of files (train.parquet, test.parquet)")
    builder = _builder(where, files)
    if builder in TEXT_BUILDERS:
        for f in files:
            check_utf8(f)
    try:
        ds = datasets.load_dataset(builder, data_files=[str(f) for f in files], split=FILE_SPLIT,
                                   cache_dir=str(datasets_cache()))
    except Exception as exc:
        raise explain_failure(where.key, files, builder, exc) from None
    return Opened(ds, where, split, tuple(files))


def _from_folder(where: Where, path: Path, split: str) -> Opened:
    import datasets

    files = sorted(f for f in path.rglob("*") if f.is_file() and f.suffix.lower() in BUILDERS)
    if not files:
        raise DataError(f"{where.key} {where.path!r} holds no data file ({', '.join(BUILDERS)})")
    builder = _builder(where, files)
    if builder in TEXT_BUILDERS:
        for f in files:
            check_utf8(f)
    try:
        ds = datasets.load_dataset(str(path), split=split, cache_dir=str(datasets_cache()))
    except ValueError as exc:
        if "split" in str(exc).lower():
            raise DataError(f"{where.key} {where.path!r}: {exc}", hint="[data] split names one of them") from None
        raise explain_failure(where.key, files, builder, exc) from None
    except Exception as exc:
        raise explain_failure(where.key, files, builder, exc) from None
    return Opened(ds, where, split, tuple(files) if len(files) == 1 else ())


def _from_saved(where: Where, path: Path, split: str) -> Opened:
    import datasets

    try:
        saved = datasets.load_from_disk(str(path))
    except Exception as exc:
        raise DataError(f"{where.key} {where.path!r}: not a folder save_to_disk wrote ({type(exc).__name__}: "
                        f"{exc})") from None
    if isinstance(saved, datasets.DatasetDict):
        if split not in saved:
            raise DataError(f"{where.key} {where.path!r} has no split {split!r} (splits: {', '.join(saved)})")
        return Opened(saved[split], where, split)
    own = str(saved.split or FILE_SPLIT)
    if split != own:
        raise DataError(f"{where.key} {where.path!r} holds one split, {own!r}, not {split!r}")
    return Opened(saved, where, split)


def _from_hub(where: Where, split: str) -> Opened:
    prepared = datasets_cache() / "___".join(_snake(where.name).split("/"))
    snapshot = _hub_snapshot(where.name)
    if prepared.is_dir():
        try:
            return Opened(_prepared(where, split), where, split)
        except DataError:
            if snapshot is None:
                raise
    if snapshot is not None:
        return _from_snapshot(where, snapshot, split)
    raise DataError(f"{where.key} {where.name!r} is not in this machine's Hugging Face cache (looked in {prepared} "
                    f"and {hub_cache() / ('datasets--' + where.name.replace('/', '--'))}); retrain reads hub data "
                    "sets from the cache only, never the network",
                    hint=f"where there is network: python -c \"import datasets; datasets.load_dataset("
                         f"'{where.name}'{', ' + repr(where.subset) if where.subset else ''})\", then copy "
                         f"{datasets_cache()} here; or set [data] path to a local copy")


def _snake(name: str) -> str:
    from datasets.naming import camelcase_to_snakecase  # type: ignore[import-untyped]

    owner, _, repo = name.rpartition("/")
    return f"{owner}/{camelcase_to_snakecase(repo)}" if owner else camelcase_to_snakecase(repo)


def _prepared(where: Where, split: str) -> Any:
    """The copy `datasets` prepared when it last loaded the id (its own offline fallback, called
    directly so that no code path can reach the network)."""
    from datasets.packaged_modules.cache.cache import Cache  # type: ignore[import-untyped]

    try:
        builder = Cache(cache_dir=str(datasets_cache()), dataset_name=where.name.split("/")[-1], repo_id=where.name,
                        config_name=where.subset or None, version="auto", hash="auto")
        return builder.as_dataset(split=split)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        message = " ".join(str(exc).replace("\n\t", " ").split())
        raise DataError(f"{where.key} {where.name!r} in {datasets_cache()}: {message}",
                        hint="[data] subset and split name what the cache holds") from None


def _hub_snapshot(name: str) -> Path | None:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(name, repo_type="dataset", local_files_only=True, cache_dir=str(hub_cache())))
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError):
        return None


def _from_snapshot(where: Where, folder: Path, split: str) -> Opened:
    import datasets

    try:
        ds = datasets.load_dataset(str(folder), where.subset or None, split=split, cache_dir=str(datasets_cache()))
    except Exception as exc:
        message = " ".join(str(exc).split())
        raise DataError(f"{where.key} {where.name!r} (the hub snapshot in {folder}): {message}",
                        hint="[data] subset and split name what the snapshot holds") from None
    return Opened(ds, where, split)
