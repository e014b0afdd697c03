"""The SFT data of `[training] sft_data_path`: rows read, pins checked, rows tokenized.

A row is one JSON object per line, one of three shapes:
- `{"messages": [{"role", "content"}, ...]}`: rendered with the tokenizer's chat template;
  the loss covers the assistant turns only.
- `{"prompt", "completion"}`: the prompt as the model sees it (chat template with a
  generation prompt), then the completion and EOS; the loss covers the completion and EOS.
- `{"text"}`: plain text; the loss covers every token (the first predicts nothing).

A CSV, JSON, parquet or Arrow file holds the same shapes as columns, and with `trainer = "sft"`
`[data]`'s keys map other columns onto them (`retrain.training.sft.table`); chat templates get
`[data] chat_template_kwargs`.

The pins `sft_data_sha256` (of the file's bytes) and `sft_data_rows` (non-blank lines) are
checked before the model loads; a mismatch names the key, the expected and the actual value.
So are the audits that vouch for the data (retrain.training.sft.contract).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from retrain.backends.protocol import Tokenizer
from retrain.config.schema import DataConfig, TrainConfig
from retrain.data.chat import encode_turns
from retrain.io.digest import file_sha256
from retrain.io.json import numbered_rows
from retrain.training.sft.contract import verify_audits
from retrain.training.sft.records import SftData, SftDataError, SftRow
from retrain.training.sft.table import read_sft_table
from retrain.types import Datum


@dataclass(frozen=True)
class Encoded:
    """One row as token ids; `target[i]` marks a supervised token (its prediction is trained)."""

    tokens: list[int]
    target: list[bool]

    def datum(self, cap: int) -> tuple[Datum, int]:
        """The row as an SFT datum cut to `cap` tokens (0 = no cap), and how many tokens the cut dropped."""
        tokens, target = self.tokens, self.target
        dropped = max(0, len(tokens) - cap) if cap > 0 else 0
        if dropped:
            tokens, target = tokens[:cap], target[:cap]
        adv = [1.0 if t else 0.0 for t in target]
        return Datum(tokens=list(tokens), logprobs=[0.0] * len(tokens), advantages=adv), dropped


def _row(path: Path, n: int, raw: Any) -> SftRow:
    where = f"{path}:{n}"
    if not isinstance(raw, dict):
        raise SftDataError(f"{where}: expected a JSON object")
    if "messages" in raw:
        msgs = raw["messages"]
        if not isinstance(msgs, list) or not msgs or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in msgs):
            raise SftDataError(f"{where}: 'messages' must be a non-empty list of {{role, content}} strings")
        if not any(m["role"] == "assistant" for m in msgs):
            raise SftDataError(f"{where}: 'messages' has no assistant turn to learn from")
        return SftRow(n, messages=tuple(msgs))
    if "prompt" in raw or "completion" in raw:
        if not (isinstance(raw.get("prompt"), str) and isinstance(raw.get("completion"), str)):
            raise SftDataError(f"{where}: 'prompt' and 'completion' must both be strings")
        return SftRow(n, prompt=raw["prompt"], completion=raw["completion"])
    if isinstance(raw.get("text"), str) and raw["text"]:
        return SftRow(n, text=raw["text"])
    raise SftDataError(f"{where}: expected 'messages', 'prompt' and 'completion', or 'text'")


def read_sft_data(path_text: str, config: TrainConfig | None = None) -> SftData:
    """The rows of one file; `config`: whose `[data]` keys map a table's columns (trainer = sft)."""
    path = Path(path_text)
    if path.is_dir() or any(ch in path_text for ch in "*?["):
        raise SftDataError(f"sft_data_path {path_text}: a folder or glob as SFT data is not built yet (its pins and "
                           "audits are of one file)", hint="point [training] sft_data_path at one file")
    if not path.is_file():
        raise SftDataError(f"sft_data_path {path_text}: no such file",
                           hint="point [training] sft_data_path at one JSONL, JSON, CSV, parquet or Arrow file")
    if path.suffix.lower() == ".jsonl" and (config is None or not maps_columns(config.data)):
        rows = [_row(path, n, raw) for n, raw in numbered_rows(path, SftDataError)]
    else:
        rows = read_sft_table(path, config or TrainConfig())
    if not rows:
        raise SftDataError(f"sft_data_path {path_text}: no rows")
    return SftData(path, rows, file_sha256(path), path.stat().st_size)


def check_pins(config: TrainConfig, data: SftData) -> None:
    t = config.training
    want = t.sft_data_sha256.strip().lower()
    if want and want != data.sha256:
        raise SftDataError(f"[training] sft_data_sha256: expected {want}, {data.path} has {data.sha256}",
                           hint="update the pin if the file changed on purpose")
    if t.sft_data_rows and t.sft_data_rows != len(data.rows):
        raise SftDataError(f"[training] sft_data_rows: expected {t.sft_data_rows}, {data.path} has {len(data.rows)} rows",
                           hint="update the pin if the file changed on purpose")


def load_sft_data(config: TrainConfig) -> SftData:
    """The data, its pins checked and its audits verified (before any model loads)."""
    data = read_sft_data(config.training.sft_data_path, config if config.training.trainer == "sft" else None)
    check_pins(config, data)
    return replace(data, audits=verify_audits(config, data))


MessagesEncoder = Callable[..., tuple[list[int], list[bool]]]


def maps_columns(keys: DataConfig) -> bool:
    """Whether `[data]`'s keys ask for more than the three row shapes by their own names."""
    return bool(keys.messages_key or keys.prompt_template or keys.system_prompt or keys.answer_key
                or keys.prompt_key != "prompt")


def encode_row(row: SftRow, tokenizer: Tokenizer, path: Path,
               template_kwargs: Mapping[str, Any] | None = None) -> Encoded:
    eos = list(tokenizer.eos_token_ids[:1])
    where = row.where or f"{path}:{row.line}"
    if row.messages:
        encode: MessagesEncoder | None = getattr(tokenizer, "encode_messages", None)
        if encode is None:
            raise SftDataError(f"{where}: 'messages' rows need a tokenizer with a chat template; "
                               "this backend's tokenizer has none", hint="use prompt/completion rows")
        try:
            ids, mask = encode(row.messages, template_kwargs) if template_kwargs else encode(row.messages)
        except ValueError as exc:
            raise SftDataError(f"{where}: {exc}") from None
        return Encoded(ids, mask)
    if row.text:
        ids = tokenizer.encode(row.text)
        return Encoded(ids, [False] + [True] * (len(ids) - 1))
    turns = row.turns or ([{"role": "user", "content": row.prompt}] if template_kwargs else ())
    prompt = encode_turns(tokenizer, turns, template_kwargs) if turns else tokenizer.encode_prompt(row.prompt)
    target = tokenizer.encode(row.completion) + eos
    return Encoded(prompt + target, [False] * len(prompt) + [True] * len(target))


def encode_all(data: SftData, tokenizer: Tokenizer, template_kwargs: Mapping[str, Any] | None = None) -> list[Encoded]:
    return [encode_row(r, tokenizer, data.path, template_kwargs) for r in data.rows]
