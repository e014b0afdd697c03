"""Config problems: every one names the file, the key, the value and what to do about it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from retrain.errors import UserError


@dataclass(frozen=True)
class ConfigIssue:
    message: str
    key: str = ""  # "[training] lr", "--lr", "[backend.options] foo", or "" for file-level
    hint: str = ""
    line: int | None = None
    path: str = ""

    def render(self) -> str:
        where = self.path
        if where and self.line is not None:
            where = f"{where}:{self.line}"
        head = f"{where}: " if where else ""
        key = f"{self.key}: " if self.key else ""
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{head}{key}{self.message}{hint}"


class ConfigError(UserError, ValueError):
    """One or more config problems, reported together (exit status 2 from the CLI)."""

    def __init__(self, issues: Sequence[ConfigIssue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(i.render() for i in self.issues))

    @classmethod
    def single(cls, message: str, *, key: str = "", hint: str = "", path: str = "",
               line: int | None = None) -> ConfigError:
        return cls([ConfigIssue(message, key=key, hint=hint, path=path, line=line)])


def did_you_mean(word: str, candidates: Iterable[str], *, cutoff: float = 0.6) -> str:
    """' Did you mean X?' for the closest candidate, or ''."""
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=cutoff)
    return f"did you mean {match[0]!r}?" if match else ""
