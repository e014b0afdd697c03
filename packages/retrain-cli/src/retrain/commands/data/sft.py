"""`retrain data` for `trainer = "sft"`: the rows of `sft_data_path` as the model reads them,
the trained (target) tokens set apart."""

from __future__ import annotations

from typing import Any

from retrain.commands.data.tokenizer import prompt_tokenizer, token_text
from retrain.config.schema import TrainConfig


def _split(tokenizer: Any, tokens: list[int], target: list[bool]) -> tuple[str, str]:
    """(the text of the tokens before the first target token, the text of the target tokens)."""
    first = target.index(True) if True in target else len(tokens)
    return token_text(tokenizer, tokens[:first]), token_text(tokenizer, [t for t, on in zip(tokens, target, strict=True) if on])


def sft_summary(config: TrainConfig, count: int) -> dict[str, Any]:
    from retrain.training.sft.data import encode_row, load_sft_data

    data = load_sft_data(config)
    tokenizer, why = prompt_tokenizer(config)
    shown = []
    for i, row in enumerate(data.rows[:count]):
        item: dict[str, Any] = {"index": i, "where": row.where or f"{data.path}:{row.line}",
                                "kind": row.kind}
        if tokenizer is None:
            item.update(text=row.text or row.prompt or "\n".join(f"[{m['role']}] {m['content']}" for m in row.messages),
                        target=row.completion)
        else:
            encoded = encode_row(row, tokenizer, data.path, dict(config.data.chat_template_kwargs))
            text, target = _split(tokenizer, encoded.tokens, encoded.target)
            item.update(tokens=len(encoded.tokens), text=text, target=target)
        shown.append(item)
    return {"path": str(data.path), "rows": len(data.rows), "sha256": data.sha256,
            "tokenizer": why or "the backend's", "prompts": shown}
