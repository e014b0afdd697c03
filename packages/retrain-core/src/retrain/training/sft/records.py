"""The records of SFT data that reading, the audits and the table reader share: one row, the
rows of one file with its digest, the error a bad file raises, and the token cap of a row.
`data.py` reads and tokenizes, `contract.py` verifies audits, `table.py` reads tables; each
imports these from here, so none of them imports another to learn what a row is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.errors import UserError

#: `sft_max_tokens` = 0 in warmup: the RL budget plus this much room for the prompt
WARMUP_PROMPT_ROOM = 512


class SftDataError(UserError, ValueError):
    """The SFT data file is missing, malformed, or does not match its pins."""


@dataclass(frozen=True)
class SftRow:
    """`turns`: the prompt as chat turns (a `[data] messages_key` row before its last assistant
    turn, or a prompt given a system prompt), the completion after them the target."""

    line: int
    prompt: str = ""
    completion: str = ""
    text: str = ""
    messages: tuple[Mapping[str, Any], ...] = ()
    turns: tuple[Mapping[str, Any], ...] = ()
    #: where the row is, for messages (`file:line`, or a table's row); "" = `{path}:{line}`
    where: str = ""

    @property
    def kind(self) -> str:
        return "messages" if self.messages else ("text" if self.text else "prompt_completion")


@dataclass(frozen=True)
class SftData:
    path: Path
    rows: list[SftRow]
    sha256: str
    size: int
    # the audits that vouch for the data, verified (retrain.training.sft.contract): "audit", "token_audit"
    audits: dict[str, Any] = field(default_factory=dict)

    def provenance(self) -> dict[str, Any]:
        """What `run_meta.json`, the SFT manifest and `retrain trace` record of the data."""
        return {"path": str(self.path.resolve()), "sha256": self.sha256, "rows": len(self.rows), "bytes": self.size,
                **self.audits}


def sft_cap(config: TrainConfig) -> int:
    """The token cap of one SFT row: `sft_max_tokens`, else `max_tokens` (standalone SFT) or
    `max_tokens` + 512 (warmup inside an RL run, where the prompt comes on top)."""
    t = config.training
    if t.sft_max_tokens:
        return t.sft_max_tokens
    return t.max_tokens if t.trainer == "sft" else t.max_tokens + WARMUP_PROMPT_ROOM
