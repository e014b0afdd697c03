"""Token ids and behaviour logprobs of one `/v1/completions` choice, whatever the server sends.

Servers differ in what they return; the first source present wins (spec backends.md §7.4):
1. `logprobs.content[*]` with `token_id` and `logprob` (chat-style logprobs);
2. explicit ids (`choice.token_ids` — vLLM's `return_token_ids` — or `logprobs.token_ids`)
   with `logprobs.token_logprobs`, cut to the shorter of the two;
3. `logprobs.tokens` as strings: vLLM's `token_id:N` form, else the tokenizer's token
   strings; if any string is unknown, the completion text re-encoded, cut to the logprobs;
4. the completion text re-encoded, with logprob 0 (the server sent no logprobs).
The source used is counted (`engine_token_recovery_*`), so a run whose logprobs are made up
shows it in every metrics row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from retrain.types import Completion, FinishReason

SOURCES = ("content", "ids", "strings", "text")


@dataclass
class Recovered:
    completion: Completion
    source: str  # one of SOURCES


def recover(choice: dict[str, Any], *, encode: Callable[[str], list[int]],
            token_ids: Callable[[Sequence[str]], list[int | None]]) -> Recovered:
    lp = choice.get("logprobs") or {}
    finish: FinishReason = "length" if choice.get("finish_reason") == "length" else "stop"
    text = str(choice.get("text") or (choice.get("message") or {}).get("content") or "")

    def done(ids: Sequence[int], logprobs: Sequence[float | None], source: str) -> Recovered:
        values = [float(x) if x is not None else 0.0 for x in logprobs]
        return Recovered(Completion(token_ids=[int(i) for i in ids], logprobs=values, finish_reason=finish), source)

    content = lp.get("content") if isinstance(lp, dict) else None
    if isinstance(content, list) and content and all(isinstance(c, dict) and "token_id" in c for c in content):
        return done([c["token_id"] for c in content], [c.get("logprob") for c in content], "content")
    values = lp.get("token_logprobs") if isinstance(lp, dict) else None
    explicit = choice.get("token_ids") or (lp.get("token_ids") if isinstance(lp, dict) else None)
    if isinstance(explicit, list) and isinstance(values, list):
        n = min(len(explicit), len(values))
        return done(explicit[:n], values[:n], "ids")
    strings = lp.get("tokens") if isinstance(lp, dict) else None
    if isinstance(strings, list) and isinstance(values, list):
        ids = _ids_from_strings(strings, token_ids)
        if ids is not None:
            return done(ids, values, "strings")
        return done(encode(text)[: len(values)], values[: len(encode(text))], "text")
    if isinstance(explicit, list):
        return done(explicit, [0.0] * len(explicit), "ids")
    ids = encode(text)
    return done(ids, [0.0] * len(ids), "text")


def _ids_from_strings(strings: Sequence[Any], token_ids: Callable[[Sequence[str]], list[int | None]]) -> list[int] | None:
    if all(isinstance(s, str) and s.startswith("token_id:") for s in strings):
        try:
            return [int(s.split(":", 1)[1]) for s in strings]
        except ValueError:
            return None
    found = token_ids([str(s) for s in strings])
    if any(i is None for i in found):
        return None
    return [int(i) for i in found if i is not None]
