"""`[CONFIG] [--flag value ...]`: finding the config path among override flags."""

from __future__ import annotations

from pathlib import Path

from retrain.config.override import MAPPING_FLAGS, Overrides, parse_overrides
from retrain.errors import UserError

DEFAULT_CONFIG = "retrain.toml"
_BOOL_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "1", "0"})


def _is_bool_flag(flag: str) -> bool:
    from retrain.config.fields import by_flat, by_section

    bare = flag[2:]
    if bare.startswith("no-"):
        return True
    spec = by_flat().get(bare.replace("-", "_"))
    if spec is None and "." in bare:
        section, _, key = bare.partition(".")
        spec = by_section().get(section, {}).get(key)
    return spec is not None and spec.is_bool


def split_args(args: list[str]) -> tuple[str | None, list[str]]:
    """(config path or None, override tokens). A bare token that is not a flag's value is the
    path, wherever it stands (the reference took the first bare token, even a flag's value)."""
    path: str | None = None
    rest: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token.startswith("--"):
            rest.append(token)
            if "=" in token or i >= len(args) or args[i].startswith("--"):
                continue
            if token not in MAPPING_FLAGS and _is_bool_flag(token) and args[i].lower() not in _BOOL_WORDS:
                continue
            rest.append(args[i])
            i += 1
        elif path is None:
            path = token
        else:
            raise UserError(f"unexpected argument {token!r} (config is already {path!r})",
                             hint="overrides are --flag value pairs")
    return path, rest


def resolve_config_args(args: list[str], *, require_file: bool = False) -> tuple[str | None, Overrides]:
    """The config path to use and the parsed overrides.

    No path: ./retrain.toml when it exists; otherwise defaults when overrides were given
    (unless `require_file`), else a usage error that says how to get a config.
    """
    path, rest = split_args(args)
    overrides = parse_overrides(rest)
    if path is None:
        if Path(DEFAULT_CONFIG).is_file():
            path = DEFAULT_CONFIG
        elif require_file or not overrides:
            raise UserError("no config given and no retrain.toml in this folder",
                             hint="pass a path, run `retrain init` to create one, or see `retrain man --topic quickstart`")
    return path, overrides
