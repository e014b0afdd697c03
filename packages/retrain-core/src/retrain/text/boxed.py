"""`\\boxed{...}` extraction shared by rewards and data sources."""

from __future__ import annotations

_MARK = "\\boxed{"


def extract_boxed(text: str) -> str:
    """Content of the last `\\boxed{...}` with balanced braces (unbalanced: to the end), stripped."""
    start = text.rfind(_MARK)
    if start < 0:
        return ""
    i = start + len(_MARK)
    depth = 1
    for j in range(i, len(text)):
        ch = text[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return text[i:].strip()
