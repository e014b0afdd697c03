"""`[data] source = "dataset"`: the training side and the held-out side of a table.

Training walks the usable rows of `[data] split` in an order shuffled by the run's seed. The
held-out side is `[data] eval_split` when set (all its usable rows, in table order); else a
twentieth of `split`'s rows, held out by a hash of each prompt (`retrain.data.split`), which
training never sees, with or without `[eval]`. Rows that give no example (an empty prompt or
reference, chat turns of the wrong shape) are dropped, counted by reason, and said in the
sequence's `notes` with the first such row's place (`file:line` for JSON Lines). A table that
gives no example at all is a `DataError` that says why.

`[eval] data_path` reads the same forms with the same keys (`eval_table`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import numpy as np

from retrain.config.schema import DataConfig, TrainConfig
from retrain.data.source import DataError, data_seed
from retrain.data.table.mapping import RowMapping, row_mapping
from retrain.data.table.rows import Scan, TableExamples, locate, scan, shuffled
from retrain.data.table.where import FILE_SPLIT, Opened, Where, open_split

#: a run asks for a table up to three times (the preflight, training, the held-out side): the
#: pass over its rows is kept for the few most recent
_KEEP = 4
_SCANS: OrderedDict[Hashable, tuple[Opened, RowMapping, Scan]] = OrderedDict()


def data_where(data: DataConfig) -> Where:
    if data.name:
        return Where("[data] name", name=data.name, subset=data.subset)
    return Where("[data] path", path=data.path)


def columns_of(dataset: Any) -> dict[str, str]:
    """A dataset's columns and their Arrow types, in table order."""
    schema = dataset.data.table.schema
    return {name: str(kind) for name, kind in zip(schema.names, schema.types, strict=True)}


def open_mapped(where: Where, split: str, config: TrainConfig, *, task: str) -> tuple[Opened, RowMapping]:
    """The split, and `[data]`'s keys checked against its columns (a DataError naming the culprit)."""
    opened = open_split(where, split)
    return opened, row_mapping(config, columns_of(opened.dataset), opened.label, task=task)


def scanned(where: Where, split: str, config: TrainConfig, *, task: str,
            split_seed: int | None) -> tuple[Opened, RowMapping, Scan]:
    opened, mapping = open_mapped(where, split, config, task=task)
    key = (where, split, mapping, split_seed, getattr(opened.dataset, "_fingerprint", None) or id(opened.dataset))
    if key in _SCANS:
        _SCANS.move_to_end(key)
        return _SCANS[key]
    found = _SCANS[key] = (opened, mapping, scan(opened, mapping, split_seed))
    while len(_SCANS) > _KEEP:
        _SCANS.popitem(last=False)
    return found


def drop_notes(opened: Opened, found: Scan) -> list[str]:
    """One line per reason rows were dropped: how many, of how many, and the first one's place."""
    return [f"{opened.label}: dropped {count} of {found.rows} rows with {reason} (the first: "
            f"{locate(opened, found.drops.first[reason])})" for reason, count in found.drops.counts.items()]


def _none_left(opened: Opened, found: Scan, side: str) -> DataError:
    why = "; ".join(drop_notes(opened, found)) or "the split has no rows"
    return DataError(f"{opened.where.key} {opened.where.label!r} gives no {side} examples: {why}")


def load_dataset_examples(config: TrainConfig) -> TableExamples:
    """The training side, in the order of the run's seed."""
    d = config.data
    split_seed = None if d.eval_split else config.training.seed
    opened, mapping, found = scanned(data_where(d), d.split, config, task="dataset", split_seed=split_seed)
    rows = found.usable if found.held is None else found.usable[~found.held]
    if not len(rows):
        raise _none_left(opened, found, "training")
    notes = drop_notes(opened, found)
    if found.held is not None:
        notes.append(f"{opened.label}: {int(found.held.sum())} of {len(found.usable)} usable rows held out for "
                     "evaluation (a hash of each prompt); training walks the other "
                     f"{len(rows)}")
    return TableExamples(opened, mapping, shuffled(rows, data_seed(config)), notes)


def load_dataset_held_out(config: TrainConfig) -> TableExamples:
    """The held-out side, in table order: `eval_split`, else the rows the hash split holds out."""
    d = config.data
    if d.eval_split:
        opened, mapping, found = scanned(data_where(d), d.eval_split, config, task="dataset", split_seed=None)
        rows = found.usable
    else:
        opened, mapping, found = scanned(data_where(d), d.split, config, task="dataset",
                                         split_seed=config.training.seed)
        assert found.held is not None
        rows = found.usable[found.held]
    if not len(rows):
        raise _none_left(opened, found, "held-out")
    return TableExamples(opened, mapping, rows, drop_notes(opened, found) if d.eval_split else ())


def eval_table(config: TrainConfig) -> TableExamples:
    """`[eval] data_path`'s rows, in table order, mapped by [data]'s keys (its split:
    `[data] eval_split`, else the one split of a file)."""
    where = Where("[eval] data_path", path=config.eval.data_path)
    opened, mapping, found = scanned(where, config.data.eval_split or FILE_SPLIT, config, task="eval",
                                     split_seed=None)
    if not len(found.usable):
        raise _none_left(opened, found, "evaluation")
    return TableExamples(opened, mapping, np.asarray(found.usable), drop_notes(opened, found))
