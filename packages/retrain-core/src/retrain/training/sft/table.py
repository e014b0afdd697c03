"""SFT rows from a table file (CSV, JSON, parquet, Arrow; JSON Lines whose columns `[data]`'s
keys map): the three row shapes of `retrain.training.sft.data`, by column.

With the keys at their defaults a row is read as a JSON Lines row is: `messages` (every
assistant turn trained), else `prompt` and `completion`, else `text`. `[data] messages_key`
names chat rows whose last assistant turn is the target (the turns before it, the prompt);
`prompt_key` / `prompt_template` build the prompt and `system_prompt` puts a system turn before
it, the completion from a `completion` column, else the answer column (`answer_key`, else
`reference`, else `answer`), as written. A row of none of these shapes is an `SftDataError`
naming its place: SFT trains on every row, so none is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.data.source import DataError
from retrain.data.table.mapping import ANSWER_COLUMNS, missing_column, template_fields
from retrain.data.table.rows import nonblank_lines
from retrain.data.table.source import columns_of
from retrain.data.table.where import FILE_SPLIT, Where, open_split
from retrain.training.sft.records import SftDataError, SftRow

KEY = "[training] sft_data_path"


def _turns(value: Any) -> list[dict[str, str]] | None:
    if not isinstance(value, list) or not value or not all(
            isinstance(t, Mapping) and isinstance(t.get("role"), str) and isinstance(t.get("content"), str)
            for t in value):
        return None
    return [{"role": t["role"], "content": t["content"]} for t in value]


class _Shapes:
    """Which columns give each shape, checked against the table's columns."""

    def __init__(self, config: TrainConfig, columns: list[str], where: str) -> None:
        self.keys = keys = config.data
        for key, name in (("[data] messages_key", keys.messages_key), ("[data] answer_key", keys.answer_key),
                          *(("[data] prompt_template's placeholder", f) for f in template_fields(keys.prompt_template))):
            if name and name not in columns:
                raise missing_column(key, name, columns, where)
        if keys.prompt_key != "prompt" and keys.prompt_key not in columns and not keys.prompt_template:
            raise missing_column("[data] prompt_key", keys.prompt_key, columns, where)
        self.completion = ["completion"] if "completion" in columns else (
            [keys.answer_key] if keys.answer_key else [c for c in ANSWER_COLUMNS if c in columns])

    def row(self, raw: Mapping[str, Any], n: int, where: str) -> SftRow:
        k = self.keys
        if k.messages_key:
            turns = _turns(raw.get(k.messages_key))
            if turns is None:
                raise SftDataError(f"{where}: {k.messages_key!r} must be a non-empty list of {{role, content}} strings")
            if turns[-1]["role"] != "assistant":
                raise SftDataError(f"{where}: {k.messages_key!r} does not end with an assistant turn to learn from")
            target = turns.pop()["content"]
            if k.system_prompt and turns and turns[0]["role"] != "system":
                turns.insert(0, {"role": "system", "content": k.system_prompt})
            return SftRow(n, completion=target, turns=tuple(turns), where=where)
        if raw.get("messages") is not None and not k.prompt_template and k.prompt_key == "prompt":
            turns = _turns(raw["messages"])
            if turns is None or not any(t["role"] == "assistant" for t in turns):
                raise SftDataError(f"{where}: 'messages' must be a non-empty list of {{role, content}} strings "
                                   "with an assistant turn")
            return SftRow(n, messages=tuple(turns), where=where)
        prompt = self._prompt(raw)
        if prompt is not None:
            completion = next((raw[c] for c in self.completion if raw.get(c) is not None), None)
            if not isinstance(completion, str) or not completion:
                raise SftDataError(f"{where}: a prompt without a completion (from "
                                   f"{' or '.join(self.completion) or 'no completion column'})")
            framed = ({"role": "system", "content": k.system_prompt}, {"role": "user", "content": prompt}) \
                if k.system_prompt else ()
            return SftRow(n, prompt=prompt, completion=completion, turns=framed, where=where)
        if isinstance(raw.get("text"), str) and raw["text"]:
            return SftRow(n, text=raw["text"], where=where)
        raise SftDataError(f"{where}: expected 'messages', a prompt ({k.prompt_key!r}) and a completion, or 'text'")

    def _prompt(self, raw: Mapping[str, Any]) -> str | None:
        k = self.keys
        if k.prompt_template:
            if any(raw.get(f) is None for f in template_fields(k.prompt_template)):
                return None
            return k.prompt_template.format_map(raw)
        value = raw.get(k.prompt_key)
        return value if isinstance(value, str) and value else None


def read_sft_table(path: Path, config: TrainConfig) -> list[SftRow]:
    try:
        opened = open_split(Where(KEY, path=str(path)), FILE_SPLIT)
    except DataError as exc:
        raise SftDataError(str(exc), hint=exc.hint) from None
    columns = list(columns_of(opened.dataset))
    try:
        shapes = _Shapes(config, columns, str(path))
    except DataError as exc:
        raise SftDataError(str(exc), hint=exc.hint) from None
    lines = nonblank_lines(path) if path.suffix.lower() == ".jsonl" else []
    return [shapes.row(raw, n, f"{path}:{lines[n - 1]}" if lines else f"{path} row {n}")
            for n, raw in enumerate(opened.dataset.data.table.to_pylist(), start=1)]
