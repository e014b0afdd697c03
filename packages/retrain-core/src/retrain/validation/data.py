"""`[data]`: the rules on its keys (`check_data`, when a config loads, reading no file), and the
data a run reads opened and checked the way the run opens it (`check_data_files`: the run
before it writes anything or loads a model, `retrain trace`, `retrain explain`, `retrain data`).

`check_data_files` opens each table the run will read (`[data]` of the `dataset` source, its
`eval_split`, `[eval] data_path` when evaluation is on) and checks `[data]`'s keys against its
columns, and reads the `math` source's local copy through its own reader. A file that cannot
be read, or a key that names no column, is a `DataError` naming the file (and line) or the key,
the columns found and the closest one. It does not map every row: what loading drops, and why,
`retrain data` shows and the run prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from retrain.config.errors import ConfigIssue
from retrain.config.schema import DataConfig, TrainConfig
from retrain.data.table.answer import pattern_problem
from retrain.data.table.mapping import template_fields
from retrain.evaluation.settings import EvalSchedule

#: the `[data]` keys that map a table's columns, read by the `dataset` source, `[eval] data_path`
MAPPING_KEYS = ("prompt_key", "answer_key", "messages_key", "prompt_template", "system_prompt", "answer_pattern")
#: the keys only the `dataset` source reads
TABLE_KEYS = ("name", "subset", "split", "eval_split")


def _issue(key: str, message: str, hint: str = "") -> ConfigIssue:
    return ConfigIssue(message, key=f"[data] {key}", hint=hint)


def check_data(c: TrainConfig) -> list[ConfigIssue]:
    d = c.data
    issues: list[ConfigIssue] = []
    if d.source == "dataset" and not c.environment.provider:
        if not d.path and not d.name:
            issues.append(_issue("path", 'source = "dataset" needs a table: [data] path or [data] name',
                                 'path = "train.parquet", or name = "openai/gsm8k"'))
        if d.path and d.name:
            issues.append(_issue("name", "and [data] path both name a table; keep one"))
    if d.subset and not d.name:
        issues.append(_issue("subset", "names a configuration of a hub id: set [data] name, or remove it"))
    if not d.split.strip():
        issues.append(_issue("split", "must name a split", 'split = "train"'))
    if d.eval_split and d.eval_split == d.split:
        issues.append(_issue("eval_split", f"{d.eval_split!r} is the training split too; evaluation would score "
                             "what training saw", 'eval_split = "test", or "" for the held-out hash split'))
    if problem := pattern_problem(d.answer_pattern):
        issues.append(_issue("answer_pattern", problem, 'answer_pattern = "gsm8k", or a regex like "#### (.+)"'))
    if d.prompt_template:
        try:
            template_fields(d.prompt_template)
        except ValueError as exc:
            issues.append(_issue("prompt_template", str(exc), 'prompt_template = "{question}"'))
    issues += _chat_keys(d)
    return issues


def _chat_keys(d: DataConfig) -> list[ConfigIssue]:
    """Chat rows are their own prompt: the keys that build one from columns are not read."""
    if not d.messages_key:
        return []
    return [_issue(key, f"is not read with messages_key = {d.messages_key!r} (chat rows are their own prompt)",
                   "remove it")
            for key, set_ in (("prompt_key", d.prompt_key != "prompt"), ("prompt_template", bool(d.prompt_template)))
            if set_]


@dataclass(frozen=True)
class DataChecked:
    """What `check_data_files` opened: one line per table, for the trace and `retrain data`."""

    lines: tuple[str, ...]


def check_data_files(c: TrainConfig) -> DataChecked:
    """Open and check what the run reads (the module docstring); a DataError on the first fault."""
    from retrain.data.table.source import data_where, open_mapped
    from retrain.data.table.where import FILE_SPLIT, Where

    lines: list[str] = []
    d = c.data
    reads_prompts = c.is_rl and not c.environment.provider
    if reads_prompts and d.source == "dataset":
        for split in (d.split, *((d.eval_split,) if d.eval_split else ())):
            opened, mapping = open_mapped(data_where(d), split, c, task="dataset")
            lines.append(f"{opened.label}: {len(opened.dataset)} rows; reads {', '.join(mapping.columns)}")
    elif reads_prompts and d.source == "math" and d.path:
        from retrain.data.math import load_local
        from retrain.data.source import DataError

        path = Path(d.path)
        if not path.exists():
            raise DataError(f"[data] path {d.path!r} does not exist")
        found = load_local(path)
        lines.append(f"[data] path {d.path}: {len(found)} problems" + "".join(f"; {n}" for n in found.notes))
    if c.eval.data_path and EvalSchedule.of(c).enabled:
        where = Where("[eval] data_path", path=c.eval.data_path)
        opened, mapping = open_mapped(where, d.eval_split or FILE_SPLIT, c, task="eval")
        lines.append(f"{opened.label}: {len(opened.dataset)} rows; reads {', '.join(mapping.columns)}")
    return DataChecked(tuple(lines))
