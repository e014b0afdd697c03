"""Dropout turned off in a model that RL trains, scores against or distils from.

The sampler runs the model in eval mode, so it never drops a unit. A trainer's forward in
train mode would, with whatever rate the checkpoint's config carries (Seed-OSS's config class
defaults `attention_dropout = residual_dropout = 0.1`; many older checkpoints carry 0.1 too),
and its logprobs would then differ from the sampler's by the dropout noise alone (a tiny random
Seed-OSS at its config's defaults: 0.011 nats per token on average, 0 once off): the importance ratio, clipping and the KL would measure that noise,
not the policy. So every rate a loaded model carries becomes 0 before anything wraps it:
`nn.Dropout` modules' `p`, the float rates that attention and residual paths read from their
module (`self.attention_dropout`, `self.residual_dropout`, ...), and the config's `*dropout*`
fields (some forwards read the config itself). LoRA's own dropout is not touched: it is added
after this (`[lora] dropout`, an explicit choice). TRL calls the same step `disable_dropout`.
"""

from __future__ import annotations

from typing import Any

import torch


def _rate(key: str, value: Any) -> bool:
    return "dropout" in key and isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _is_config(value: Any) -> bool:
    return hasattr(value, "to_dict") and hasattr(value, "model_type")


def _zero_config(config: Any, prefix: str, rates: dict[str, float], seen: set[int]) -> None:
    """Zero the rates of a config and its sub-configs (`text_config.attention_dropout`),
    recording each in `rates` under its dotted name."""
    if id(config) in seen:
        return
    seen.add(id(config))
    for key, value in list(vars(config).items()):
        if _rate(key, value):
            rates[prefix + key] = float(value)
            setattr(config, key, 0.0)
        elif _is_config(value):
            _zero_config(value, f"{prefix}{key}.", rates, seen)


def disable_dropout(model: torch.nn.Module) -> dict[str, float]:
    """Every dropout rate of `model` set to 0 (the module docstring); returns the config's rates
    as they were, for the start-up line (empty: the checkpoint carried none)."""
    rates: dict[str, float] = {}
    seen: set[int] = set()
    config = getattr(model, "config", None)
    if config is not None:
        _zero_config(config, "", rates, seen)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
            continue
        for key, value in list(vars(module).items()):
            if _rate(key, value):
                setattr(module, key, 0.0)
        sub = getattr(module, "config", None)
        if _is_config(sub):
            _zero_config(sub, "", {}, seen)  # a sub-model's own config (already named above)
    return rates


def dropout_note(rates: dict[str, float]) -> str | None:
    """The start-up line naming what was turned off, or None when nothing was."""
    if not rates:
        return None
    listed = ", ".join(f"{k}={v:g}" for k, v in sorted(rates.items()))
    return (f"dropout off: the checkpoint's config sets {listed}; the trainer's forward runs without it, as "
            "the sampler does ([backend.options] train_keep_dropout = true keeps it)")
