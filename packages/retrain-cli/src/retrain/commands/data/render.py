"""`retrain data`'s text view of its summary (the JSON view is the summary itself)."""

from __future__ import annotations

from typing import Any


def _counts(found: dict[str, Any]) -> list[str]:
    if "rows" in found:  # SFT rows
        return [f"SFT rows: {found['rows']} from {found['path']}"]
    lines = [f"Training examples: {found['examples']} ([data] source {found['source']!r}, in the run's order)"]
    lines += [f"  {note}" for note in found.get("notes", ())]
    held = found.get("held_out")
    if held is not None:
        lines.append(f"Held-out problems: {held['problems']}")
        lines += [f"  {note}" for note in held["notes"]]
    else:
        lines.append("Held-out problems: evaluation is off")
    return lines


def _lengths(found: dict[str, Any]) -> list[str]:
    n = found.get("lengths")
    if not n:
        return []
    line = (f"Prompt tokens, first {n['checked']}: min {n['min']}, median {n['median']}, max {n['max']}")
    if n["max_prompt_tokens"]:
        line += f"; {n['over']} over max_prompt_tokens = {n['max_prompt_tokens']} (the run drops them)"
    return [line]


def render_text(found: dict[str, Any]) -> str:
    lines = [f"Data: {t}" for t in found["tables"]]
    lines += _counts(found)
    lines += _lengths(found)
    if found.get("tokenizer", "the backend's") != "the backend's":
        lines.append(f"Prompts below are untemplated: {found['tokenizer']}")
    for row in found["prompts"]:
        tokens = f", {row['tokens']} tokens" if "tokens" in row else ""
        lines += ["", f"--- {row['index'] + 1} ({row['where']}{tokens}) ---", row["text"]]
        if "target" in row:
            lines += ["--- target ---", row["target"]]
        if row.get("reference"):
            lines.append(f"--- reference: {row['reference']}")
        if row.get("completion"):
            lines.append(f"--- SFT target (warmup): {row['completion']}")
    return "\n".join(lines)
