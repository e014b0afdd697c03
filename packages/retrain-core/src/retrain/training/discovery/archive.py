"""The TTT-Discover archive: a tree of attempts at one problem (spec algorithms.md §13).

Entry 0 is the root: empty text, scored as an empty completion. Every sampled completion
becomes a child of the entry its prompt started from. An entry's `q` is the better of its own
reward and its best child's `q`, so a good descendant keeps its ancestors worth expanding.

Selection is PUCT over the whole archive:
    score = q + c · prior · sqrt(1 + N_total) / (1 + expansions)
with the prior by rank: entries sorted by (reward, q, -depth, -id) descending, the one at
index i gets (n - i) / (n(n + 1)/2). Pruning removes the worst non-root leaf, so a kept
entry's ancestors are always kept too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

ROOT = 0


@dataclass
class Entry:
    id: int
    text: str
    reward: float
    parent: int | None
    depth: int
    created_step: int
    expansions: int = 0
    best_child: float = -math.inf
    children: list[int] = field(default_factory=list)

    @property
    def q(self) -> float:
        return max(self.reward, self.best_child)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "parent": self.parent, "depth": self.depth, "reward": self.reward, "q": self.q,
                "expansions": self.expansions, "created_step": self.created_step, "text": self.text}


class Archive:
    def __init__(self, root_reward: float) -> None:
        self.entries: dict[int, Entry] = {ROOT: Entry(ROOT, "", float(root_reward), None, 0, -1)}
        self.n_total = 0
        self._next_id = 1

    def __len__(self) -> int:
        return len(self.entries)

    def ranked(self) -> list[Entry]:
        """Best first: (reward, q, -depth, -id) descending."""
        return sorted(self.entries.values(), key=lambda e: (e.reward, e.q, -e.depth, -e.id), reverse=True)

    def priors(self) -> dict[int, float]:
        ranked = self.ranked()
        n = len(ranked)
        total = n * (n + 1) / 2
        return {e.id: (n - i) / total for i, e in enumerate(ranked)}

    def scores(self, c: float) -> dict[int, float]:
        priors = self.priors()
        explore = math.sqrt(1 + self.n_total)
        return {e.id: e.q + c * priors[e.id] * explore / (1 + e.expansions) for e in self.entries.values()}

    def select(self, b: int, c: float) -> list[int]:
        """The ids of `b` start states, best score first; cycles when `b` exceeds the archive."""
        scores = self.scores(c)
        order = sorted(self.entries.values(), key=lambda e: (scores[e.id], e.reward, -e.depth, -e.id), reverse=True)
        return [order[i % len(order)].id for i in range(b)]

    def record_selection(self, entry_id: int) -> None:
        for e in self._lineage(entry_id):
            e.expansions += 1
        self.n_total += 1

    def add(self, parent: int, text: str, reward: float, step: int) -> int:
        up = self.entries[parent]
        entry = Entry(self._next_id, text, float(reward), parent, up.depth + 1, step)
        self._next_id += 1
        self.entries[entry.id] = entry
        up.children.append(entry.id)
        for e in self._lineage(parent):
            e.best_child = max(e.best_child, entry.q)
        return entry.id

    def prune(self, max_entries: int) -> list[int]:
        """Remove worst non-root leaves until at most `max_entries` remain; the removed ids."""
        removed: list[int] = []
        while len(self.entries) > max(max_entries, 1):
            leaves = [e for e in self.entries.values() if e.id != ROOT and not e.children]
            worst = min(leaves, key=lambda e: (e.reward, e.expansions, e.created_step, e.depth, e.id))
            del self.entries[worst.id]
            assert worst.parent is not None
            self.entries[worst.parent].children.remove(worst.id)
            removed.append(worst.id)
            self._refresh(worst.parent)
        return removed

    def best(self) -> Entry:
        return self.ranked()[0]

    def _refresh(self, entry_id: int | None) -> None:
        """Recompute best-child values from the children's q, from `entry_id` up to the root."""
        while entry_id is not None:
            e = self.entries[entry_id]
            e.best_child = max((self.entries[c].q for c in e.children), default=-math.inf)
            entry_id = e.parent

    def _lineage(self, entry_id: int) -> list[Entry]:
        """The entry and its ancestors, up to the root."""
        out: list[Entry] = []
        current: int | None = entry_id
        while current is not None:
            e = self.entries[current]
            out.append(e)
            current = e.parent
        return out

    def metrics(self) -> dict[str, float]:
        best = self.best()
        return {"discover_archive_size": float(len(self.entries)), "discover_archive_best_reward": best.reward,
                "discover_archive_best_depth": float(best.depth), "discover_archive_expansions": float(self.n_total)}

    def to_dict(self) -> dict[str, Any]:
        return {"n_total": self.n_total, "best": self.best().id,
                "entries": [e.to_dict() for e in sorted(self.entries.values(), key=lambda e: e.id)]}
