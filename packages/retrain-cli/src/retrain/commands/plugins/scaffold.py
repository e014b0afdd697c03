"""`retrain init-plugin --kind KIND --name NAME [--output-dir DIR] [--with-test]`.

Writes `<DIR>/<name>.py` (DIR defaults to ./plugins, the default [plugins] search path) and,
with --with-test, `<DIR>/../tests/test_<name>_plugin.py`, which passes as generated. Prints
the TOML that selects the plugin. Never overwrites a file.
"""

from __future__ import annotations

import os
from pathlib import Path

from retrain.commands.plugins.kinds import KINDS
from retrain.commands.plugins.name import class_name, sanitize
from retrain.commands.plugins.template import render
from retrain.config.errors import did_you_mean
from retrain.errors import UserError


def scaffold(kind: str, raw_name: str, output_dir: str, with_test: bool) -> list[Path]:
    spec = KINDS.get(kind)
    if spec is None:
        raise UserError(
            f"unknown plugin kind {kind!r}",
            hint=did_you_mean(kind, KINDS) or f"one of: {', '.join(KINDS)}",
        )
    name = sanitize(raw_name)
    attr = spec.attr.format(name=name, Name=class_name(name))
    folder = Path(output_dir)
    plugin = folder / f"{name}.py"
    targets = [plugin]
    test = folder.resolve().parent / "tests" / f"test_{name}_plugin.py"
    if with_test:
        targets.append(test)
    for path in targets:
        if path.exists():
            raise UserError(
                f"{path} already exists", hint="choose another --name or remove the file"
            )
    values = {"name": name, "attr": attr, "class": class_name(name)}
    folder.mkdir(parents=True, exist_ok=True)
    plugin.write_text(render(f"{kind}.py.txt", **values), encoding="utf-8")
    if with_test:
        test.parent.mkdir(parents=True, exist_ok=True)
        rel = Path(os.path.relpath(plugin.resolve(), test.parent)).as_posix()
        header = render("header.py.txt", rel_path=rel, **values)
        test.write_text(render(f"test_{kind}.py.txt", header=header, **values), encoding="utf-8")
    return targets


def snippet(kind: str, raw_name: str, output_dir: str) -> str:
    spec = KINDS[kind]
    name = sanitize(raw_name)
    attr = spec.attr.format(name=name, Name=class_name(name))
    text = spec.snippet.format(name=name, attr=attr)
    prefix = Path(output_dir).as_posix().strip("/").replace("/", ".")
    if prefix and prefix != "plugins" and not text.startswith("#"):
        text += f'\n[plugins]\nsearch_paths = ["{prefix}"]\n'
    return text


def run(kind: str | None, name: str | None, output_dir: str, with_test: bool) -> None:
    if not kind or not name:
        raise UserError(
            "init-plugin needs --kind and --name",
            hint=f"kinds: {', '.join(KINDS)}; e.g. retrain init-plugin --kind transform --name my_credit",
        )
    written = scaffold(kind, name, output_dir, with_test)
    for path in written:
        print(f"Wrote {path}")
    print(f"\n{KINDS[kind].summary}. Add to your config:\n")
    print(snippet(kind, name, output_dir))
    if with_test:
        print(f"Test it with: python -m pytest {written[-1]}")
    print("Run it with: retrain retrain.toml")
