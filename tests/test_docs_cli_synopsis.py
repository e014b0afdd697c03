"""docs/cli.md's synopsis names every option of every command, read from the command line
itself, so an option added to a command cannot be left out of the page (`retrain eval --n`
once was)."""

from __future__ import annotations

from pathlib import Path

import typer

from retrain.cli import app

REPO = Path(__file__).resolve().parents[1]
#: the commands the synopsis shows under another form: training is `retrain [CONFIG]`
SHOWN_AS = {"run": "retrain [CONFIG]"}


def synopsis() -> list[str]:
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    return text.split("```text\n", 1)[1].split("```", 1)[0].splitlines()


def lines_of(words: str, lines: list[str]) -> list[str]:
    return [line for line in lines if line == words or line.startswith(words + " ")]


def test_every_option_of_every_command_is_in_the_synopsis() -> None:
    lines = synopsis()
    missing = []
    for name, command in typer.main.get_command(app).commands.items():  # type: ignore[attr-defined]
        if name in SHOWN_AS:
            assert lines_of(SHOWN_AS[name], lines), name
            continue
        own = lines_of(f"retrain {name}", lines)
        if not own:
            missing.append(f"retrain {name}: no line")
        subcommands = command.commands.items() if hasattr(command, "commands") else [("", command)]
        for sub, leaf in subcommands:
            # a group's default subcommand (`status` for `status show`) is shown as the group
            shown = (lines_of(f"retrain {name} {sub}", lines) if sub else []) or own
            for param in leaf.params:
                for flag in (f for f in param.opts if f.startswith("--") and f != "--help"):
                    if not any(flag in line for line in shown):
                        missing.append(f"retrain {name} {sub}".rstrip() + f": {flag}")
    assert not missing, missing
