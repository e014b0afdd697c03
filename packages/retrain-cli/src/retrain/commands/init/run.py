"""`retrain init [--template NAME] [--list] [--interactive] [--output FILE] [--force]`."""

from __future__ import annotations

import os
from pathlib import Path

from retrain.commands.init.templates import TEMPLATES
from retrain.config.errors import did_you_mean
from retrain.errors import UserError
from retrain.io.atomic import write_text_atomic
from retrain.process.gpus import gpu_visible

GPU_MARK = "  [needs a CUDA GPU]"


def run(template: str, list_: bool, output: str | None, force: bool, interactive: bool = False) -> None:
    if list_:
        print("Available templates:")
        width = max(len(name) for name in TEMPLATES)
        for t in TEMPLATES.values():
            print(f"  {t.name:<{width}} -> {t.filename:<13} {t.summary}{GPU_MARK if t.gpu else ''}")
        if not gpu_visible():
            here = [t.name for t in TEMPLATES.values() if not t.gpu]
            print(f"No GPU is visible on this machine: {', '.join(here[:-1])} and {here[-1]} run here "
                  "(a template's header says what else it needs).")
        return
    chosen = TEMPLATES.get(template)
    if chosen is None:
        raise UserError(f"unknown template {template!r}",
                         hint=did_you_mean(template, TEMPLATES) or f"one of: {', '.join(TEMPLATES)}")
    text = chosen.text()
    if interactive:
        from retrain.commands.init.interactive import ask, customise, require_terminal

        require_terminal()
        answers = ask()
        chosen, text = answers.template, customise(answers.template.text(), answers)
    target = Path(output or chosen.filename)
    if target.exists() and not force:
        raise UserError(f"{target} already exists — refusing to overwrite", hint="pass --force or --output OTHER.toml")
    write_text_atomic(target, text)
    print(f"Created {target} (template: {chosen.name})")
    if chosen.gpu and not gpu_visible():
        print("Note: this template trains Qwen3-4B on a CUDA GPU, and none is visible here; "
              "`retrain init -t cpu` writes one that runs on this machine.")
    shown = target if target.is_absolute() else Path(os.curdir) / target
    print(f"Next: retrain explain {shown}   (preview)")
    print(f"      retrain {shown}           (train)")
