"""`retrain data [CONFIG] [--flag value ...] [-n N] [--lengths N] [--json]`: what a run will read,
before it spends GPU hours on it.

It opens the data as the run does (`retrain.validation.data`: a file that cannot be read or a
key that names no column fails here, exit status 2), loads the examples (what the run's
`[data]` source, or `[training] sft_data_path` for SFT, gives, and what loading dropped and
why), the held-out problems when evaluation is on, and shows the first N prompts exactly as
the model will read them: through the chat template of the tokenizer the run's backend loads
(`BackendDefinition.tokenizer`, without the model), with their references and token counts.
The lengths of the first `--lengths` prompts are counted against `[data] max_prompt_tokens`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from retrain.commands.config_args import resolve_config_args
from retrain.commands.data.render import render_text
from retrain.commands.data.sft import sft_summary
from retrain.commands.data.tokenizer import prompt_tokenizer, token_text
from retrain.config.schema import TrainConfig
from retrain.data.chat import PromptEncoder
from retrain.data.source import load_examples, notes_of
from retrain.errors import UserError
from retrain.evaluation.settings import EvalSchedule
from retrain.types import Example
from retrain.validation.data import check_data_files
from retrain.validation.load import load_config


def _untemplated(example: Example) -> str:
    turns = example.messages or [{"role": "user", "content": example.prompt}]
    return "\n".join(f"[{t['role']}] {t['content']}" for t in turns)


def _where(examples: Sequence[Example], i: int) -> str:
    locate = getattr(examples, "location", None)
    return str(locate(i)) if locate is not None else f"example {i + 1}"


def prompts(config: TrainConfig, examples: Sequence[Example], tokenizer: Any, count: int) -> list[dict[str, Any]]:
    encode = PromptEncoder.of(config)
    out = []
    for i in range(min(count, len(examples))):
        ex = examples[i]
        row: dict[str, Any] = {"index": i, "where": _where(examples, i), "reference": ex.reference}
        if ex.completion:
            row["completion"] = ex.completion
        if tokenizer is None:
            row["text"] = _untemplated(ex)
        else:
            ids = encode(ex, tokenizer)
            row.update(tokens=len(ids), text=token_text(tokenizer, ids))
        out.append(row)
    return out


def lengths(config: TrainConfig, examples: Sequence[Example], tokenizer: Any, count: int) -> dict[str, Any] | None:
    """The token lengths of the first `count` prompts, and how many exceed max_prompt_tokens."""
    if tokenizer is None or count <= 0:
        return None
    encode = PromptEncoder.of(config)
    sizes = sorted(len(encode(examples[i], tokenizer)) for i in range(min(count, len(examples))))
    limit = config.data.max_prompt_tokens
    return {"checked": len(sizes), "min": sizes[0], "median": sizes[len(sizes) // 2], "max": sizes[-1],
            "max_prompt_tokens": limit, "over": sum(s > limit for s in sizes) if limit else 0}


def held_out(config: TrainConfig) -> dict[str, Any] | None:
    if not EvalSchedule.of(config).enabled:
        return None
    from retrain.evaluation.problems import load_problems

    problems = load_problems(config)
    return {"problems": len(problems), "notes": list(notes_of(problems))}


def summary(config: TrainConfig, count: int, scan: int) -> dict[str, Any]:
    if config.environment.provider:
        raise UserError(f"[environment] provider = {config.environment.provider!r} supplies the prompts; retrain "
                        "data shows what a [data] source or sft_data_path gives")
    tables = check_data_files(config).lines
    if config.training.trainer == "sft":
        return {"tables": list(tables), **sft_summary(config, count)}
    if not config.is_rl:
        raise UserError(f"trainer = {config.training.trainer!r} reads no prompts")
    examples = load_examples(config)
    tokenizer, why = prompt_tokenizer(config)
    return {"source": config.data.source, "tables": list(tables), "examples": len(examples),
            "notes": list(notes_of(examples)), "held_out": held_out(config), "tokenizer": why or "the backend's",
            "prompts": prompts(config, examples, tokenizer, count), "lengths": lengths(config, examples, tokenizer, scan)}


def run(args: list[str], count: int, scan: int, as_json: bool) -> None:
    path, overrides = resolve_config_args(args)
    config = load_config(path, overrides).config
    found = summary(config, count, scan)
    print(json.dumps(found, indent=2) if as_json else render_text(found))
