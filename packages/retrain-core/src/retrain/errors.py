"""The one base of every problem a user can fix by changing input: a config, a flag, a path,
an installed package. The CLI catches `UserError` once and prints its message (and hint) as
one line with exit status 2, no traceback; anything else is a bug or a runtime failure.

Each domain keeps its own subclass (config, data, backend, reward, run directory, ...) so
callers can still catch the narrow kind; the subclasses also keep their historical builtin
base (ValueError, RuntimeError, ...) for code written against those.
"""

from __future__ import annotations


class UserError(Exception):
    def __init__(self, message: str = "", *, hint: str = "") -> None:
        self.hint = hint
        super().__init__(message)


class RunStopped(UserError):
    """A run that stopped itself by a limit the user set (the reward-error budget): a
    checkpoint is saved and the run can resume. The CLI exits with `exit_code`."""

    exit_code = 3
