"""`retrain init -i`: the terminal setup (spec config-cli.md §6.7).

A menu picks the template (1 quickstart, 2 experiment, 3 campaign, 4 cpu; anything else is
quickstart), then three prompts customise it: training steps, the seed and a W&B project.
An empty or non-numeric answer keeps the shown default. The answers are applied to the
template text line by line, so its comments and layout survive.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

from retrain.commands.errors import CommandFailed
from retrain.commands.init.templates import TEMPLATES, Template

MENU: tuple[str, ...] = ("quickstart", "experiment", "campaign", "cpu", "smollm2")
DEFAULT_SEED = 42

Ask = Callable[[str], str]


@dataclass(frozen=True)
class Answers:
    template: Template
    max_steps: int
    seed: int | None  # None: a campaign keeps its seeds list
    wandb_project: str


def require_terminal() -> None:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise CommandFailed("retrain init -i needs a terminal; without one use "
                            "`retrain init --template NAME` (see `retrain init --list`)", code=2)


def _number(answer: str, default: int) -> int:
    try:
        return int(answer.strip())
    except ValueError:
        return default


def _steps_default(template: Template) -> int:
    found = re.search(r"^max_steps\s*=\s*(\d+)", template.text(), re.MULTILINE)
    return int(found.group(1)) if found else 100


def ask(prompt: Ask = input) -> Answers:
    print("Which starter config?")
    for i, name in enumerate(MENU, 1):
        t = TEMPLATES[name]
        print(f"  {i}) {name:<11} {t.summary}")
    choice = prompt("Choose [1]: ").strip()
    name = MENU[int(choice) - 1] if choice in {str(i) for i in range(1, len(MENU) + 1)} else MENU[0]
    template = TEMPLATES[name]
    steps_default = _steps_default(template)
    steps = _number(prompt(f"Training steps [{steps_default}]: "), steps_default)
    if steps <= 0:
        steps = steps_default
    seed: int | None = None
    if name != "campaign":
        seed = _number(prompt(f"Reproducible seed [{DEFAULT_SEED}]: "), DEFAULT_SEED)
        if not 0 <= seed <= 4294967295:
            seed = DEFAULT_SEED
    wandb = prompt("Wandb project name (empty to skip): ").strip()
    return Answers(template, steps, seed, wandb)


def customise(text: str, answers: Answers) -> str:
    """The template text with the answers applied: `max_steps` and `seed` replaced (`seed`
    added after `max_steps` when the template has none), `wandb_project` set, uncommented, or
    added to `[logging]`."""
    text = re.sub(r"^max_steps\s*=\s*\d+", f"max_steps = {answers.max_steps}", text, count=1, flags=re.MULTILINE)
    if answers.seed is not None:
        if re.search(r"^seed\s*=", text, re.MULTILINE):
            text = re.sub(r"^seed\s*=\s*-?\d+", f"seed = {answers.seed}", text, count=1, flags=re.MULTILINE)
        else:
            text = re.sub(r"^(max_steps = \d+)$", rf"\1\nseed = {answers.seed}", text, count=1, flags=re.MULTILINE)
    if answers.wandb_project:
        line = f"wandb_project = {json.dumps(answers.wandb_project)}"
        pattern = r"^#?\s*wandb_project\s*=.*$"
        if re.search(pattern, text, re.MULTILINE):
            text = re.sub(pattern, lambda _: line, text, count=1, flags=re.MULTILINE)
        else:
            text = re.sub(r"^\[logging\]\n(?:[^\[\n].*\n)*", lambda m: m.group(0) + line + "\n", text, count=1,
                          flags=re.MULTILINE)
    return text
