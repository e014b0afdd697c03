"""`.env` parsing: comments, quotes, export, existing variables win."""

from __future__ import annotations

from pathlib import Path

from retrain.config.env import load_dotenv, parse_dotenv


def test_parse() -> None:
    text = "# c\nA=1\n export B = 'two' \nC=\"x=y\"\nbad line\n"
    assert parse_dotenv(text) == {"A": "1", "B": "two", "C": "x=y"}


def test_existing_variables_win(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("A=file\nB=file\n")
    env = {"A": "shell"}
    assert load_dotenv(tmp_path / ".env", env) == ["B"]
    assert env == {"A": "shell", "B": "file"}
