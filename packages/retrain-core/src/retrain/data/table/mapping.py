"""From a table's row to an `Example`, by `[data]`'s keys; and the checks of those keys against
the table's columns, which fail before any model loads.

A row becomes an example or a reason it cannot be one (a drop, counted by the caller): a
prompt that is empty, a reference that is empty or that `answer_pattern` does not find, chat
turns that are not a list of {role, content} strings. Which columns a config names is checked
once against the table's schema: a missing one is a `DataError` naming the columns found and
the closest match.
"""

from __future__ import annotations

import difflib
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.data.source import DataError
from retrain.data.table.answer import answer_extractor
from retrain.types import Example

#: the answer columns `answer_key = ""` looks for, in order
ANSWER_COLUMNS = ("reference", "answer")
#: the column an example's id comes from, when the table has it
ID_COLUMN = "id"


def template_fields(template: str) -> tuple[str, ...]:
    """The columns a prompt template names; a ValueError for a template that does not parse."""
    names: list[str] = []
    for _, field, _, _ in string.Formatter().parse(template):
        if field is None:
            continue
        name = field.split(".", 1)[0].split("[", 1)[0]
        if not name or name.isdigit():
            raise ValueError(f"placeholder {{{field}}} names no column (write {{column_name}})")
        if name not in names:
            names.append(name)
    return tuple(names)


def missing_column(key: str, column: str, columns: Sequence[str], where: str) -> DataError:
    close = difflib.get_close_matches(column, list(columns), n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}?" if close else ""
    return DataError(f"{key} {column!r}: no such column in {where} (columns: {', '.join(columns) or 'none'})"
                     + (f"; {hint}" if hint else ""), hint=f"{key} = {close[0]!r}" if close else "")


@dataclass(frozen=True)
class RowMapping:
    """The columns a config reads and how a row becomes an example."""

    prompt_key: str
    #: the answer columns, the first that is not null in a row giving its answer; none: a chat
    #: row's last assistant turn
    answer_keys: tuple[str, ...]
    messages_key: str
    template: str
    system_prompt: str
    answer_pattern: str
    id_key: str
    task: str

    @cached_property
    def fields(self) -> tuple[str, ...]:
        return template_fields(self.template) if self.template else ()

    @cached_property
    def extract(self) -> Callable[[str], str]:
        return answer_extractor(self.answer_pattern)

    @cached_property
    def columns(self) -> tuple[str, ...]:
        """The columns a row is read from."""
        prompt = (self.messages_key,) if self.messages_key else (self.fields or (self.prompt_key,))
        extra = (*self.answer_keys, *((self.id_key,) if self.id_key else ()))
        return tuple(dict.fromkeys(prompt + extra))

    def example(self, row: Mapping[str, Any]) -> Example | str:
        """The row's example, or why it has none (read as "rows with ...")."""
        found = self.parts(row)
        if isinstance(found, str):
            return found
        prompt, reference, completion, messages = found
        return Example(prompt=prompt, reference=reference, completion=completion, task=self.task,
                       example_id=self._id(row), messages=messages)

    def parts(self, row: Mapping[str, Any]) -> Parts | str:
        """(prompt, reference, completion, chat turns) of the row, or why it has none: `example`
        without building one (the pass over a million rows needs only the prompt)."""
        for name in self.columns:
            if row.get(name) is not None:
                break
        else:
            return f"none of {', '.join(self.columns)} (a null line, or other keys)"
        if self.messages_key:
            return self._chat_parts(row)
        if self.template:
            empty = next((name for name in self.fields if row.get(name) is None), None)
            if empty is not None:
                return f"a null {empty!r}"
            try:
                prompt = self.template.format_map(row)
            except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                return "values prompt_template cannot format"
        else:
            prompt = _text(row.get(self.prompt_key))
        if not prompt.strip():
            return "an empty prompt"
        reference = self._reference(self._answer(row), "")
        if reference[1]:
            return reference[1]
        messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": prompt}] \
            if self.system_prompt else None
        return prompt, reference[0], "", messages

    def _chat_parts(self, row: Mapping[str, Any]) -> Parts | str:
        turns = row.get(self.messages_key)
        if not isinstance(turns, list) or not turns or not all(
                isinstance(t, Mapping) and isinstance(t.get("role"), str) and isinstance(t.get("content"), str)
                for t in turns):
            return f"a {self.messages_key!r} that is not a list of {{role, content}} strings"
        messages = [{"role": t["role"], "content": t["content"]} for t in turns]
        completion = ""
        if messages[-1]["role"] == "assistant":
            completion = messages.pop()["content"]
        users = [m["content"] for m in messages if m["role"] == "user"]
        if not users or not users[-1].strip():
            return "no user turn before the last assistant turn"
        if self.system_prompt and messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        answer = self._answer(row) if self.answer_keys else completion
        reference, why = self._reference(answer, "" if self.answer_keys else " (the last assistant turn)")
        if why:
            return why
        return users[-1], reference, completion, messages

    def _answer(self, row: Mapping[str, Any]) -> Any:
        for key in self.answer_keys:
            value = row.get(key)
            if value is not None:
                return value
        return None

    def _reference(self, answer: Any, what: str) -> tuple[str, str]:
        text = _text(answer)
        if not text.strip():
            return "", f"an empty reference{what}"
        reference = self.extract(text)
        if not reference:
            return "", f"an answer{what} in which answer_pattern {self.answer_pattern!r} finds no reference"
        return reference, ""

    def _id(self, row: Mapping[str, Any]) -> int | str | None:
        value = row.get(self.id_key) if self.id_key else None
        return value if isinstance(value, int | str) and not isinstance(value, bool) else None


#: a row's prompt, reference, completion and chat turns
Parts = tuple[str, str, str, list[dict[str, str]] | None]


def _text(value: Any) -> str:
    if type(value) is str:
        return value
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else str(value)


def row_mapping(config: TrainConfig, columns: Mapping[str, str], where: str, *, task: str = "dataset") -> RowMapping:
    """The mapping of `[data]`'s keys onto a table with `columns` (name -> Arrow type), checked:
    every column it names exists and has a usable type, else a DataError naming the culprit."""
    data = config.data
    names = list(columns)

    def need(key: str, column: str) -> None:
        if column not in columns:
            raise missing_column(key, column, names, where)

    if data.messages_key:
        need("[data] messages_key", data.messages_key)
        if not columns[data.messages_key].startswith(("list<", "large_list<")):
            raise DataError(f"[data] messages_key {data.messages_key!r}: the column in {where} holds "
                            f"{columns[data.messages_key]}, not a list of {{role, content}}")
    elif data.prompt_template:
        for name in template_fields(data.prompt_template):
            need("[data] prompt_template's placeholder", name)
    else:
        need("[data] prompt_key", data.prompt_key)
        if columns[data.prompt_key].startswith(("list<", "large_list<")):
            raise DataError(f"[data] prompt_key {data.prompt_key!r}: the column in {where} holds chat turns "
                            f"({columns[data.prompt_key]})", hint=f'messages_key = "{data.prompt_key}"')
    if data.answer_key:
        need("[data] answer_key", data.answer_key)
        answers: tuple[str, ...] = (data.answer_key,)
    else:
        answers = tuple(c for c in ANSWER_COLUMNS if c in columns)
        if not answers and not data.messages_key:
            close = difflib.get_close_matches("answer", names, n=1, cutoff=0.4)
            raise DataError(f"[data] answer_key: {where} has no 'reference' or 'answer' column (columns: "
                            f"{', '.join(names)})", hint=f'answer_key = "{close[0] if close else names[-1]}"')
    return RowMapping(prompt_key=data.prompt_key, answer_keys=answers, messages_key=data.messages_key,
                      template=data.prompt_template, system_prompt=data.system_prompt,
                      answer_pattern=data.answer_pattern, id_key=ID_COLUMN if ID_COLUMN in columns else "", task=task)

