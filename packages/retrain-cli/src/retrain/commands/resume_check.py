"""`retrain resume-check LOGDIR [--config PATH] [--max-steps N] [--json]`: exit 0 when a resume
can proceed, 1 when it cannot, 2 when the config does not load."""

from __future__ import annotations

import json

from retrain.commands.errors import CommandFailed
from retrain.training.resume_check import check_resume
from retrain.validation.load import load_config


def run(log_dir: str, max_steps: int | None, as_json: bool, config_path: str | None = None) -> None:
    config = load_config(config_path).config if config_path is not None else None
    result = check_resume(log_dir, max_steps=max_steps, config=config)
    if config_path is not None:
        result.facts["config"] = config_path
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        print(f"{result.path}: {'ok' if result.ok else 'NOT resumable'}")
        for key in ("config", "trainer", "log_dir", "phase", "step", "next_step", "max_steps", "checkpoint",
                    "checkpoint_path", "digests", "fallback_checkpoint", "resume_mode"):
            if result.facts.get(key) is not None:
                print(f"  {key:<16} {result.facts[key]}")
        for issue in result.issues:
            print(f"  [{issue['severity']}] {issue['code']}: {issue['message']}")
        if result.ok:
            print(f"Resume with: retrain {config_path or 'CONFIG'} --resume {result.path}")
    if not result.ok:
        raise CommandFailed(code=1)
