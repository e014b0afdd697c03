"""How a command fails: one clear line per problem on stderr, exit status 2, no traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NoReturn

import typer

from retrain.config.errors import ConfigError
from retrain.errors import RunStopped, UserError
from retrain.process.world import current_world


class CommandFailed(Exception):
    """A command that ran and found a failure it reports itself (exit status `code`)."""

    def __init__(self, message: str = "", code: int = 1) -> None:
        self.code = code
        super().__init__(message)


def fail(message: str, *, hint: str = "", code: int = 2) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(f"  hint: {hint}", file=sys.stderr)
    raise typer.Exit(code)


def report_config_error(exc: ConfigError) -> NoReturn:
    issues = exc.issues
    noun = "problem" if len(issues) == 1 else "problems"
    if len(issues) > 1:
        print(f"error: {len(issues)} config {noun}:", file=sys.stderr)
    for issue in issues:
        prefix = "  " if len(issues) > 1 else "error: "
        text = issue.render()
        first, *rest = text.split("\n")
        print(prefix + first, file=sys.stderr)
        for line in rest:
            print("      " + line, file=sys.stderr)
    raise typer.Exit(2)


def guarded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a command body, turning known failures into exit codes without a traceback."""
    try:
        return fn(*args, **kwargs)
    except ConfigError as exc:
        report_config_error(exc)
    except RunStopped as exc:  # a run that stopped itself, saved: its own line and status
        if current_world().leader:  # every rank of a torchrun world stops alike; rank 0 says so
            print(f"retrain: {exc}", file=sys.stderr)
            if exc.hint:
                print(f"  {exc.hint}", file=sys.stderr)
        raise typer.Exit(exc.exit_code) from None
    except UserError as exc:
        fail(str(exc), hint=exc.hint)
    except CommandFailed as exc:
        if str(exc):
            print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(exc.code) from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise typer.Exit(130) from None
    except BrokenPipeError:
        raise typer.Exit(0) from None
