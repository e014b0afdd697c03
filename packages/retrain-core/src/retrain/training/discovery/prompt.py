"""The discovery memory appended to the problem's prompt, and the runner's parameters.

Prompt = base prompt + "\\n\\nDiscovery memory:\\n\\n" + sections joined by blank lines:
the current candidate (the start state's text), the other promising attempts (the top
`context_k` other non-empty entries, best first) when there are any, and the instruction.
Prompts are strings here, so the memory is part of the one user message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from retrain.training.discovery.archive import Archive

HEADER = "\n\nDiscovery memory:\n\n"
INSTRUCTION = "Improve on the current candidate if possible. Return only the full improved solution."
MIN_CHARS = 64


@dataclass(frozen=True)
class DiscoverParams:
    """From `[algorithm.params]`; `archive_max_entries` can only raise the floor of
    max(64, 2·B·G) (the archive must hold at least two steps of children)."""

    context_k: int = 3
    puct_c: float = 1.0
    archive_max_entries: int = 4096
    candidate_char_limit: int = 1200
    context_char_limit: int = 600

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> DiscoverParams:
        d = cls()
        return cls(context_k=max(0, int(params.get("context_k", d.context_k))),
                   puct_c=float(params.get("puct_c", d.puct_c)),
                   archive_max_entries=int(params.get("archive_max_entries", d.archive_max_entries)),
                   candidate_char_limit=max(MIN_CHARS, int(params.get("candidate_char_limit", d.candidate_char_limit))),
                   context_char_limit=max(MIN_CHARS, int(params.get("context_char_limit", d.context_char_limit))))

    def max_entries(self, batch_size: int, group_size: int) -> int:
        return max(max(64, 2 * batch_size * group_size), self.archive_max_entries)


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def memory_prompt(base: str, archive: Archive, start: int, params: DiscoverParams) -> str:
    current = archive.entries[start]
    sections = ["Current candidate to improve:\n" + truncate(current.text, params.candidate_char_limit)]
    others = [e for e in archive.ranked() if e.id != start and e.text][: params.context_k]
    if others:
        listed = "\n".join(f"{k}. reward={e.reward:.4f}\n{truncate(e.text, params.context_char_limit)}"
                           for k, e in enumerate(others, 1))
        sections.append("Other promising attempts:\n" + listed)
    sections.append(INSTRUCTION)
    return base + HEADER + "\n\n".join(sections)
