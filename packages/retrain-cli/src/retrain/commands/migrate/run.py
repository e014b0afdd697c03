"""`retrain migrate-config CONFIG [--check|--write|--output PATH|--stdout] [--backup] [--stdin] [--json]`."""

from __future__ import annotations

import difflib
import json
import shutil
import sys
import tomllib
from pathlib import Path

from retrain.commands.errors import CommandFailed
from retrain.config.migrate import migrate_text
from retrain.config.source import parse_toml, read_toml
from retrain.errors import UserError
from retrain.io.atomic import write_text_atomic


def _check_modes(config: str | None, *, check: bool, write: bool, output: str | None, backup: bool,
                 stdin: bool, stdout: bool) -> None:
    if stdin and config:
        raise UserError("pass either a config path or --stdin, not both")
    if not stdin and not config:
        raise UserError("migrate-config needs a config path (or --stdin)")
    if check and (write or output or stdout or backup):
        raise UserError("--check only reports; it cannot be combined with --write, --output, --stdout or --backup")
    if stdin and write:
        raise UserError("--write rewrites a file; with --stdin use --stdout or --output")
    if write and output:
        raise UserError("choose --write (in place) or --output PATH")
    if stdout and (write or output):
        raise UserError("--stdout cannot be combined with --write or --output")
    if backup and not write:
        raise UserError("--backup only applies to --write")


def run(config: str | None, *, check: bool, write: bool, output: str | None, backup: bool,
        stdin: bool, stdout: bool, as_json: bool) -> None:
    _check_modes(config, check=check, write=write, output=output, backup=backup, stdin=stdin, stdout=stdout)
    if stdin:
        text = sys.stdin.read()
        if not text.strip():
            raise UserError("standard input is empty")
        name = "<stdin>"
        parse_toml(text, name)  # raises a ConfigError for malformed TOML
    else:
        assert config is not None
        source = read_toml(config)
        text, name = source.text, config
    try:
        result = migrate_text(text)
    except tomllib.TOMLDecodeError as exc:  # pragma: no cover - parse_toml caught it already
        raise UserError(f"{name}: malformed TOML: {exc}") from None
    diff = "".join(difflib.unified_diff(text.splitlines(keepends=True), result.output_text.splitlines(keepends=True),
                                        fromfile=name, tofile=f"{name}.migrated"))
    mode = "check" if check else "write" if write else "output" if output else "stdout" if stdout else "preview"
    written, backup_path = False, None
    if result.changed and write:
        assert config is not None
        if backup:
            backup_path = f"{config}.bak"
            shutil.copy2(config, backup_path)
        write_text_atomic(config, result.output_text)
        written = True
    elif output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(output, result.output_text)
        written = True
    if as_json:
        print(json.dumps({
            "config": name, "mode": mode, "needs_migration": result.changed, "changed": result.changed,
            "legacy_keys": result.legacy_keys, "merged_backend_options": result.merged_backend_options,
            "diff": diff, "written": written, "output_path": output or (config if written else None),
            "backup_path": backup_path,
        }, indent=2))
    elif stdout:
        sys.stdout.write(result.output_text)
    elif check:
        if result.changed:
            print(f"Migration required in {name} (legacy keys: {', '.join(result.legacy_keys)}).")
        else:
            print(f"No migration needed: {name}")
    elif not result.changed:
        print(f"No migration needed: {name}")
    elif written:
        print(f"Migrated {name} -> {output or config}" + (f" (backup: {backup_path})" if backup_path else ""))
    else:
        sys.stdout.write(diff)
    if check and result.changed:
        raise CommandFailed(code=1)
